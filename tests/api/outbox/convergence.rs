//! Telegram follows the database after faults, measured from outside: the `subgate` binary
//! serves two channels (one seat-limited) over its own database while a seeded sequence of
//! random operations runs against it over HTTP — door-1 payments, staff grants, expiries,
//! back-dated terms, revivals, deletions, sweeps — and simulated buyers follow the join link
//! the fake Bot API delivered to them and send their join request to the Telegram door.
//! Interleaved with them: whole-API outages (500s, hanging calls), 429 storms, and kill -9 of
//! the server while its Bot API calls are held open, then a restart. Within 60 seconds of the
//! end of the last fault, each chat's member list in the fake must equal the Telegram accounts
//! whose membership of that channel is live in the database, with no access effect (grant,
//! revoke, unban, join decision) pending or failed; otherwise the test fails with the
//! difference.
//!
//! `CONVERGENCE_SEED` picks the sequence (printed first, so a failure can be replayed) and
//! `CONVERGENCE_OPS` its length. The server's log goes to a file named in a failure's message
//! (removed after a pass).
//!
//! The last test checks, through the worker, the two rules of Telegram the fake models that
//! matter most here: `unbanChatMember` without `only_if_banned` removes a member, and approving
//! a request that is not pending is 400 `HIDE_REQUESTER_MISSING`.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    outbox::convergence_harness::{
        Api, Buyers, Server, World, differences, end_fault, perform, start_fault, tail,
    },
    support::{
        effects::{app_with, join_request_update, run},
        fake_bot::{FakeBot, Reply, TOKEN},
        helpers::{TestApp, test_env, url_for},
    },
};

/// The sequence `make test` runs; `CONVERGENCE_SEED` picks another.
const DEFAULT_SEED: u64 = 20_250_121;

/// Operations per run; `CONVERGENCE_OPS` changes it.
const DEFAULT_OPS: usize = 120;

/// The contract: Telegram matches the database this long after the last fault ends.
const CONVERGENCE: Duration = Duration::from_secs(60);

const BUYERS: usize = 15;

const FIRST_USER: i64 = 880_001;

/// Open channel: no seat limit, two days of grace.
const OPEN_CHAT: i64 = -1_001_088_000_001;

/// Seat-limited channel: five seats, no grace.
const SEATED_CHAT: i64 = -1_001_088_000_002;

pub(crate) const CHATS: [i64; 2] = [OPEN_CHAT, SEATED_CHAT];

pub(crate) const TITLES: [&str; 2] = ["Open room", "Seated room"];

// ---- the plan: operations and faults, drawn from the seed ----

#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Door 1: a new order, paid in full.
    Pay { buyer: usize, channel: usize },
    /// `POST /api/memberships`.
    Grant {
        buyer: usize,
        channel: usize,
        days: i64,
    },
    /// `PATCH … {"status": "expired"}`.
    Expire { buyer: usize, channel: usize },
    /// `PATCH … {"expires_at": <hours ago>}` (the sweep then moves it to grace or expired).
    BackDate {
        buyer: usize,
        channel: usize,
        hours: i64,
    },
    /// `PATCH … {"status": "active", "expires_at": <days ahead>}`.
    Revive {
        buyer: usize,
        channel: usize,
        days: i64,
    },
    /// `DELETE /api/memberships/{id}`.
    Delete { buyer: usize, channel: usize },
    /// `POST /api/sweep`.
    Sweep,
}

#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// Every Bot API method answers this (500, or never) while the fault lasts.
    Outage(Reply),
    /// These methods answer 429 with these `retry_after`s while the fault lasts.
    Storm(Vec<(&'static str, u64)>),
    /// kill -9 of the server while its calls are held open this long, then a restart.
    Kill { hold_ms: u64, down_ms: u64 },
}

#[derive(Debug, Clone)]
enum Step {
    Op(Op),
    /// Waits this long before the next step.
    Pause(u64),
    Start(Fault),
    /// Ends the fault started last.
    End,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number: {v:?}"))
        })
        .unwrap_or(default)
}

fn random_op(rng: &mut StdRng) -> Op {
    let buyer = rng.gen_range(0..BUYERS);
    let channel = rng.gen_range(0..CHATS.len());
    match rng.gen_range(0..100) {
        0..35 => Op::Pay { buyer, channel },
        35..47 => Op::Grant {
            buyer,
            channel,
            days: rng.gen_range(1..60),
        },
        47..59 => Op::Expire { buyer, channel },
        59..71 => Op::BackDate {
            buyer,
            channel,
            hours: rng.gen_range(1..96),
        },
        71..81 => Op::Revive {
            buyer,
            channel,
            days: rng.gen_range(1..60),
        },
        81..90 => Op::Delete { buyer, channel },
        _ => Op::Sweep,
    }
}

fn random_storm(rng: &mut StdRng) -> Fault {
    let mut methods = [
        "sendMessage",
        "approveChatJoinRequest",
        "declineChatJoinRequest",
        "banChatMember",
        "unbanChatMember",
    ];
    methods.shuffle(rng);
    let n = rng.gen_range(2..=methods.len());
    Fault::Storm(
        methods[..n]
            .iter()
            .map(|m| (*m, rng.gen_range(1..=3)))
            .collect(),
    )
}

/// `ops` operations with a pause after each, and five faults spread over them: a 500 outage, a
/// hanging outage, a 429 storm, a kill -9, and one more of a random kind, in random order. An
/// outage or storm spans a run of operations; a kill follows a burst of payments (so calls are
/// in flight) and the operations stop while the server is down.
fn plan(rng: &mut StdRng, ops: usize) -> Vec<Step> {
    let mut faults = vec![
        Fault::Outage(Reply::ServerError),
        Fault::Outage(Reply::Hang),
        random_storm(rng),
        Fault::Kill {
            hold_ms: 1500,
            down_ms: 300,
        },
    ];
    faults.push(match rng.gen_range(0..3) {
        0 => Fault::Kill {
            hold_ms: 1500,
            down_ms: 1000,
        },
        1 => random_storm(rng),
        _ => Fault::Outage(Reply::ServerError),
    });
    faults.shuffle(rng);
    let segment = (ops / (faults.len() + 1)).max(2);
    let mut steps = Vec::new();
    let mut faults = faults.into_iter();
    let mut end_at = None;
    for i in 0..ops {
        if end_at == Some(i) {
            steps.push(Step::End);
            end_at = None;
        }
        if i > 0 && i % segment == 0 {
            match faults.next() {
                Some(kill @ Fault::Kill { .. }) => {
                    for _ in 0..4 {
                        steps.push(Step::Op(Op::Pay {
                            buyer: rng.gen_range(0..BUYERS),
                            channel: rng.gen_range(0..CHATS.len()),
                        }));
                    }
                    steps.push(Step::Start(kill));
                    steps.push(Step::End);
                }
                Some(fault) => {
                    steps.push(Step::Start(fault));
                    end_at = Some(i + rng.gen_range(segment / 2..segment));
                }
                None => {}
            }
        }
        steps.push(Step::Op(random_op(rng)));
        steps.push(Step::Pause(rng.gen_range(20..90)));
    }
    if end_at.is_some() {
        steps.push(Step::End);
    }
    steps
}

/// Random payments, staff edits, sweeps and join requests through outages, 429 storms and
/// kill -9 of the server mid-flight: within 60 s of the last fault, every chat's members are
/// exactly the live members of its channel and no access effect is pending or failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_matches_the_database_within_a_minute_of_the_last_fault() {
    let seed: u64 = env_or("CONVERGENCE_SEED", DEFAULT_SEED);
    let ops: usize = env_or("CONVERGENCE_OPS", DEFAULT_OPS);
    println!("convergence: CONVERGENCE_SEED={seed} CONVERGENCE_OPS={ops}");
    let mut rng = StdRng::seed_from_u64(seed);
    let steps = plan(&mut rng, ops);

    let fake = FakeBot::start().await;
    let app = TestApp::spawn().await;
    let mut env = test_env(&url_for(&app.db_name));
    env.insert("TELEGRAM_BOT_TOKEN".into(), TOKEN.into());
    env.insert("TELEGRAM_API_URL".into(), fake.url.clone());
    env.insert("LOG_FORMAT".into(), "pretty".into());
    let log = std::env::temp_dir().join(format!("{}-serve.log", app.db_name));
    let base = Arc::new(Mutex::new(String::new()));
    let mut server = Server {
        env,
        child: None,
        base: base.clone(),
        log: log.clone(),
        starts: 0,
    };
    server.start().await;
    let api = Api {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        base,
        token: Arc::new(Mutex::new(String::new())),
    };
    api.login().await;

    let mut channels = Vec::new();
    for (i, (chat, title)) in CHATS.iter().zip(TITLES).enumerate() {
        let extra = if i == 0 {
            json!({"grace_period_days": 2})
        } else {
            json!({"seat_limit": 5})
        };
        let mut body = json!({"telegram_chat_id": chat, "title": title, "price_minor": 19900,
                              "currency": "UAH", "billing_period_days": 30});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, channel) = api.staff(Method::POST, "/api/channels", body).await;
        assert_eq!(status, 201, "{channel}");
        channels.push(channel["id"].as_i64().unwrap());
    }
    let mut subscribers = Vec::new();
    for i in 0..BUYERS {
        let user = FIRST_USER + i as i64;
        let (status, s) = api
            .staff(
                Method::POST,
                "/api/subscribers",
                json!({"telegram_user_id": user, "username": format!("buyer{user}")}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        subscribers.push(s["id"].as_i64().unwrap());
    }
    let world = World {
        subscribers,
        channels,
    };

    // The buyers act all along, during the faults and after them.
    let buyers = {
        let (fake, api) = (fake.clone(), api.clone());
        tokio::spawn(async move {
            let mut buyers = Buyers::default();
            loop {
                buyers.round(&fake, &api).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let started = Instant::now();
    let mut active: Option<Fault> = None;
    let mut last_fault_end = Instant::now();
    let mut faults = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Op(op) => perform(&app, &api, &world, op, n, seed).await,
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Start(fault) => {
                faults.push(format!(
                    "{fault:?} at {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                start_fault(fault, &fake, &mut server).await;
                active = Some(fault.clone());
            }
            Step::End => {
                if let Some(fault) = active.take() {
                    end_fault(&fault, &fake);
                }
                last_fault_end = Instant::now();
            }
        }
    }
    // Terms that ended meanwhile are ended in the database too, so "live" and the status agree.
    let (status, body) = api.staff(Method::POST, "/api/sweep", Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let ops_done = started.elapsed();

    let deadline = last_fault_end + CONVERGENCE;
    let outcome = loop {
        let diff = differences(&app, &fake).await;
        match diff {
            None => break Ok(last_fault_end.elapsed()),
            Some(diff) if Instant::now() >= deadline => break Err(diff),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    buyers.abort();
    server.kill9().await;
    match outcome {
        Ok(took) => {
            println!(
                "convergence: {ops} operations and {} faults in {:.1} s ({} starts); \
                 Telegram matched the database {:.1} s after the last fault; {} Bot API calls",
                faults.len(),
                ops_done.as_secs_f64(),
                server.starts,
                took.as_secs_f64(),
                fake.calls().len()
            );
            let _ = std::fs::remove_file(&log);
        }
        Err(diff) => panic!(
            "Telegram does not match the database {} s after the last fault \
             (CONVERGENCE_SEED={seed} CONVERGENCE_OPS={ops} replays this run):\n{diff}\
             operations took {:.1} s; faults (from the start of the operations): {faults:#?}\n\
             server log: {} — it ends:\n{}",
            CONVERGENCE.as_secs(),
            ops_done.as_secs_f64(),
            log.display(),
            tail(&log, 20)
        ),
    }
}

// ---- the fake's rules of Telegram, through the worker ----

/// The fake answers as Telegram does where a wrong call would quietly break access:
/// `unbanChatMember` without `only_if_banned` takes a member out, approving a request that is
/// not pending is 400 `HIDE_REQUESTER_MISSING`. Through the worker, a grant of a member already
/// in the chat leaves them in, and an approval whose request is gone is done (not a dead
/// letter) without letting anyone in.
#[tokio::test]
async fn the_worker_keeps_members_in_and_settles_approvals_of_requests_that_are_gone() {
    let fake = FakeBot::start().await;
    let (chat, inside, withdrawn) = (-1_001_088_000_101, 881_001, 881_002);

    // The fake's rules, called directly.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = |method: &str, params: Value| {
        let req = http
            .post(format!("{}/bot{TOKEN}/{method}", fake.url))
            .json(&params);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    fake.add_member(chat, 881_999);
    let (status, _) = call(
        "unbanChatMember",
        json!({"chat_id": chat, "user_id": 881_999, "only_if_banned": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        fake.is_member(chat, 881_999),
        "only_if_banned leaves a member in"
    );
    let (status, _) = call(
        "unbanChatMember",
        json!({"chat_id": chat, "user_id": 881_999}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        !fake.is_member(chat, 881_999),
        "a plain unban takes a member out"
    );
    let (status, body) = call(
        "approveChatJoinRequest",
        json!({"chat_id": chat, "user_id": 881_999}),
    )
    .await;
    assert_eq!(
        (status, body["description"].as_str()),
        (400, Some("Bad Request: HIDE_REQUESTER_MISSING"))
    );
    assert!(!fake.is_member(chat, 881_999));
    fake.clear_calls();

    // Through the worker.
    let app = app_with(&fake).await;
    let c = crate::support::effects::channel(&app, chat, json!({})).await;
    let member = crate::support::effects::subscriber(&app, inside).await;
    let requester = crate::support::effects::subscriber(&app, withdrawn).await;
    fake.add_member(chat, inside);
    crate::support::effects::grant(&app, member, c, 30).await;
    crate::support::effects::grant(&app, requester, c, 30).await;
    // The requester's join request reaches the door, but it is no longer pending in Telegram
    // (withdrawn) when the approval is sent.
    app.post_telegram_update(join_request_update(
        chat,
        withdrawn,
        chrono::Utc::now().timestamp(),
    ))
    .await
    .expect(200);
    for _ in 0..3 {
        run(&app).await;
    }

    assert_eq!(fake.members_of(chat), vec![inside], "{:?}", fake.methods());
    for call in fake.calls_of("unbanChatMember") {
        assert_eq!(call.params["only_if_banned"], true, "{call:?}");
    }
    let approvals = fake.calls_of("approveChatJoinRequest");
    assert_eq!(approvals.len(), 1, "{:?}", fake.methods());
    let rows = app
        .db()
        .await
        .query(
            "SELECT kind, user_id, status, payload->>'note' AS note FROM effects ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    for r in &rows {
        assert_eq!(r.get::<_, String>("status"), "done", "{r:?}");
    }
    let approve = rows
        .iter()
        .find(|r| r.get::<_, String>("kind") == "join_approve")
        .expect("the approval was enqueued");
    assert!(
        approve
            .get::<_, Option<String>>("note")
            .is_some_and(|n| n.contains("HIDE_REQUESTER_MISSING")),
        "{approve:?}"
    );
}
