//! Serving HTTP/1.1 connections: the accept loop, the per-connection timeouts and the
//! connection cap, so slow or idle clients cannot hold the server's file descriptors.
//!
//! hyper's own `header_read_timeout` also bounds the wait *between* keep-alive requests, so it
//! cannot give a short header timeout and a longer idle timeout at once. Each connection
//! therefore has its own watchdog over three phases:
//! - **head**: from accept, or from the first byte after an idle spell, until the request's
//!   headers are complete (the router is called): at most [`ConnectionLimits::header_read_timeout`];
//! - **busy**: a request is being handled (its own limit is `REQUEST_TIMEOUT_SECS`): no
//!   connection timeout;
//! - **sending**: its response is being written, until its body is done: at most
//!   [`ConnectionLimits::idle_timeout`] without a byte leaving. A client that stops reading a
//!   streamed response (a CSV export) stops its bytes once the socket's buffers are full; the
//!   response then ends there, as does one whose body stops coming. A slow reader is never cut
//!   while bytes still move;
//! - **idle**: after a response, until the next request's first byte: at most
//!   [`ConnectionLimits::idle_timeout`] without bytes moving (a client that stops reading the
//!   end of a response hyper already holds counts as idle too).
//!
//! When the watchdog fires the connection is dropped, which closes the socket. At most
//! [`ConnectionLimits::max_connections`] connections are served at once; when that many are
//! open, the loop stops accepting until one closes, so new clients wait in the kernel's
//! backlog rather than being refused (the timeouts free a slot held by a slow client within
//! the header or idle timeout, whether it is slow to send or to read).

use std::{
    convert::Infallible,
    future::Future,
    io,
    net::SocketAddr,
    pin::{Pin, pin},
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::ConnectInfo,
    http::{Request, Response},
};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, watch},
    time::Instant,
};

/// The limits every connection is served under.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// How long a request's headers may take to arrive, from the connection's start or from
    /// the request's first byte.
    pub header_read_timeout: Duration,
    /// How long a connection may sit between requests without a byte moving, and how long a
    /// response may go without a byte of it leaving.
    pub idle_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish (idle connections close at once) and returns when every
/// connection has closed. Each request carries `ConnectInfo<SocketAddr>` of its peer.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut listener = listener;
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Dropping `stop_tx` tells every connection to shut down gracefully; `done_tx` closes once
    // every connection (each holding a receiver) has ended.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let stop = stop_rx.clone();
        let done = done_rx.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, app, limits, stop).await;
            drop(slot);
            drop(done);
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(stop_rx);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// One connection, under its watchdog (see the module documentation).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    stop: watch::Receiver<()>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(WatchedIo {
        inner: stream,
        activity: activity.clone(),
    });
    let service = Tracked {
        app,
        peer,
        activity: activity.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watchdog times the head; hyper's timer would also cut idle connections at that time.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection(io, service));
    let mut stop = pin!(async move {
        let mut stop = stop;
        let _ = stop.changed().await;
    });
    let mut stopping = false;
    // Phases change without waking the watchdog; it looks again at least this often, which is
    // soon enough because every new phase allows at least this long.
    let recheck = limits.header_read_timeout.min(limits.idle_timeout);
    loop {
        let now = Instant::now();
        let wake = match activity.deadline(&limits) {
            Some((deadline, phase)) if deadline <= now => {
                if phase == STALLED {
                    tracing::info!(%peer, "response ended unfinished: no byte of it left for \
                        IDLE_TIMEOUT_SECS (the client stopped reading, or the body stopped \
                        coming); connection closed");
                } else {
                    tracing::debug!(%peer, phase, "connection closed: timed out");
                }
                return;
            }
            Some((deadline, _)) => deadline.min(now + recheck),
            None => now + recheck,
        };
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut stop, if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// The name of the deadline of a response that makes no progress, as the watchdog logs it.
const STALLED: &str = "sending";

/// Where a connection is in its life (see the module documentation).
#[derive(Debug, Clone, Copy)]
enum Phase {
    Head {
        since: Instant,
    },
    /// `handling` requests are in the router, the responses of `sending` more are being
    /// written; `since` is when a byte last left (or the last response began).
    Busy {
        handling: usize,
        sending: usize,
        since: Instant,
    },
    Idle {
        since: Instant,
    },
}

/// A connection's phase, shared by its IO (bytes moving), its service (requests) and its
/// watchdog. The lock is held only to read or set the phase, never across an await; a
/// poisoned lock is recovered (the phase is always whole).
struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When the current phase runs out, and its name; `None` while a request is handled.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, &'static str)> {
        match *self.phase() {
            Phase::Head { since } => Some((since + limits.header_read_timeout, "head")),
            Phase::Busy {
                handling: 0, since, ..
            } => Some((since + limits.idle_timeout, STALLED)),
            Phase::Busy { .. } => None,
            Phase::Idle { since } => Some((since + limits.idle_timeout, "idle")),
        }
    }

    /// Bytes arrived: after an idle spell, they start the next request's head.
    fn read(&self) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
            };
        }
    }

    /// Bytes left: progress of the response being written, or of one hyper still holds after
    /// an idle connection's last request.
    fn wrote(&self) {
        let mut phase = self.phase();
        match &mut *phase {
            Phase::Idle { since } | Phase::Busy { since, .. } => *since = Instant::now(),
            Phase::Head { .. } => {}
        }
    }

    /// A request's headers are complete: the connection is busy until the [`InFlight`] is
    /// dropped.
    fn begin_request(self: &Arc<Self>) -> InFlight {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy {
                handling,
                sending,
                since,
            } => Phase::Busy {
                handling: handling + 1,
                sending,
                since,
            },
            _ => Phase::Busy {
                handling: 1,
                sending: 0,
                since: Instant::now(),
            },
        };
        InFlight {
            activity: self.clone(),
            sending: false,
        }
    }
}

/// A request on its connection: handled until [`InFlight::responded`], then its response is
/// sent until this is dropped (its body done or abandoned).
struct InFlight {
    activity: Arc<Activity>,
    sending: bool,
}

impl InFlight {
    /// The router answered: from now on the response must keep making progress.
    fn responded(&mut self) {
        let mut phase = self.activity.phase();
        if let Phase::Busy {
            handling, sending, ..
        } = *phase
        {
            *phase = Phase::Busy {
                handling: handling.saturating_sub(1),
                sending: sending + 1,
                since: Instant::now(),
            };
            self.sending = true;
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut phase = self.activity.phase();
        let Phase::Busy {
            mut handling,
            mut sending,
            since,
        } = *phase
        else {
            return;
        };
        if self.sending {
            sending = sending.saturating_sub(1);
        } else {
            handling = handling.saturating_sub(1);
        }
        *phase = if handling + sending == 0 {
            Phase::Idle {
                since: Instant::now(),
            }
        } else {
            Phase::Busy {
                handling,
                sending,
                since,
            }
        };
    }
}

/// The socket, telling the connection's [`Activity`] when bytes move.
struct WatchedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The router as hyper's service for one connection: adds the peer's `ConnectInfo` and marks
/// the connection busy from the call until the response is returned, then sending until its
/// body is done.
#[derive(Clone)]
struct Tracked {
    app: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let mut request = self.activity.begin_request();
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let handled = tower::ServiceExt::oneshot(self.app.clone(), req.map(Body::new));
        Box::pin(async move {
            let response = handled.await?;
            request.responded();
            Ok(response.map(|body| TrackedBody {
                body,
                _request: request,
            }))
        })
    }
}

/// A response body that keeps its connection sending until hyper is done with it.
struct TrackedBody {
    body: Body,
    _request: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnectionLimits = ConnectionLimits {
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_connections: 1,
    };

    fn phase_of(activity: &Activity) -> &'static str {
        match *activity.phase() {
            Phase::Head { .. } => "head",
            Phase::Busy { handling: 0, .. } => "sending",
            Phase::Busy { .. } => "busy",
            Phase::Idle { .. } => "idle",
        }
    }

    #[test]
    fn phases_follow_requests_and_bytes() {
        let activity = Arc::new(Activity::new());
        let start = Instant::now();
        let (deadline, phase) = activity.deadline(&LIMITS).unwrap();
        assert_eq!(phase, "head");
        assert!(deadline >= start + LIMITS.header_read_timeout - Duration::from_secs(1));
        // Bytes of the head do not extend it.
        activity.read();
        assert_eq!(activity.deadline(&LIMITS).unwrap().0, deadline);
        let mut first = activity.begin_request();
        assert!(activity.deadline(&LIMITS).is_none());
        // A second request while the first is in flight (pipelining) keeps it busy.
        let second = activity.begin_request();
        drop(second);
        assert_eq!(phase_of(&activity), "busy");
        // Answered: its response must keep making progress.
        first.responded();
        assert_eq!(phase_of(&activity), "sending");
        let (sending_deadline, phase) = activity.deadline(&LIMITS).unwrap();
        assert_eq!(phase, STALLED);
        std::thread::sleep(Duration::from_millis(5));
        activity.wrote();
        assert!(activity.deadline(&LIMITS).unwrap().0 > sending_deadline);
        // Bytes arriving meanwhile (a pipelined request) do not start a head.
        activity.read();
        assert_eq!(phase_of(&activity), "sending");
        drop(first);
        assert_eq!(phase_of(&activity), "idle");
        assert_eq!(activity.deadline(&LIMITS).unwrap().1, "idle");
        activity.wrote();
        assert_eq!(phase_of(&activity), "idle");
        // The next request's first byte starts its head.
        activity.read();
        assert_eq!(phase_of(&activity), "head");
    }

    #[test]
    fn a_request_still_handled_keeps_a_sending_one_from_timing_out() {
        let activity = Arc::new(Activity::new());
        let mut first = activity.begin_request();
        first.responded();
        let second = activity.begin_request();
        assert!(activity.deadline(&LIMITS).is_none());
        drop(second);
        assert_eq!(activity.deadline(&LIMITS).unwrap().1, STALLED);
        drop(first);
        assert_eq!(phase_of(&activity), "idle");
    }
}
