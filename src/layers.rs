//! The layering rules of `docs/ARCHITECTURE.md`, checked over the source: each top-level folder
//! (a folder with its submodules is one node) imports only the folders below it in [`LAYERS`],
//! so no module outside `api` refers to `api` and the folders form no cycle. A test only: it
//! reads `src/**/*.rs` and follows every `crate::` path in code (comments and string literals
//! are skipped), `use crate::…` groups included.
//!
//! It also refuses rows read by position: outside `src/db/`, no code calls
//! `.get(<integer literal>)` or `.try_get(<integer literal>)` (a turbofish such as
//! `get::<_, i64>(0)` included). Rows are read by column name through a `db::FromRow`
//! projection owned by the table's module. The rule is syntactic, so it refuses a slice's
//! `.get(0)` too: a slice uses `.first()` (as clippy asks anyway) or an index that is not a
//! literal, which keeps the rule exact for rows without knowing types.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// The top-level folders from the top of the tree to its bottom: each may import only the
/// ones after it. `docs/ARCHITECTURE.md` says what each owns.
const LAYERS: [&str; 18] = [
    "api",
    "app",
    "bot",
    "telegram",
    "payments",
    "referrals",
    "messages",
    "orders",
    "reports",
    "catalog",
    "access",
    "outbox",
    "staff",
    "telegram_api",
    "config",
    "present",
    "db",
    "common",
];

/// The top-level modules declared in `lib.rs` (`pub mod x;` or `mod x;`).
fn top_level_modules(lib: &str) -> BTreeSet<String> {
    code_only(lib)
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';').map(|name| name.trim().to_string())
        })
        .collect()
}

/// The source without comments and without the contents of string and char literals, so
/// only code is searched. Newlines are kept.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A one-character literal such as '"' (a lifetime never has a closing quote).
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal such as '\'' or '\n'.
            let mut j = i + 2;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The first path segments after every `crate::` in `code` (and inside `use crate::…`
/// groups, the first segment of each item).
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        if start > 0 {
            let before = bytes[start - 1];
            // `$crate::` counts too; `some_crate::` does not.
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                if let Some(name) = leading_ident(item.trim()) {
                    found.insert(name.to_string());
                }
            }
        } else if let Some(name) = leading_ident(rest) {
            found.insert(name.to_string());
        }
    }
    found
}

/// The comma-separated items of a brace group whose opening brace was just consumed, up to its
/// closing brace, split at depth zero only.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

fn leading_ident(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The files under `dir` whose extension is one of `extensions`.
fn source_files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, extensions, out);
        } else if path
            .extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
        {
            out.push(path);
        }
    }
}

/// The node a file belongs to: its top-level module, or `None` for the crate root files.
fn node_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

/// Edges of the module graph: node → the other top-level modules it refers to.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let modules = top_level_modules(&lib);
    let mut files = Vec::new();
    source_files(src, &["rs"], &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(node) = node_of(src, &file) else {
            continue;
        };
        let code = code_only(&fs::read_to_string(&file).expect("a source file"));
        let targets = graph.entry(node.clone()).or_default();
        for name in crate_references(&code) {
            if name != node && modules.contains(&name) {
                targets.insert(name);
            }
        }
    }
    graph
}

/// The 1-based lines of `code` (already [`code_only`]) where a row is read by position:
/// `.get(` or `.try_get(`, an optional turbofish, then an integer literal as the only argument.
fn positional_reads(code: &str) -> Vec<usize> {
    let chars: Vec<char> = code.chars().collect();
    let mut lines = Vec::new();
    let mut line = 1;
    for i in 0..chars.len() {
        if chars[i] == '\n' {
            line += 1;
        }
        if chars[i] != '.' {
            continue;
        }
        let mut j = i + 1;
        for word in ["try_get", "get"] {
            if chars[j..].starts_with(&word.chars().collect::<Vec<_>>()) {
                j += word.len();
                break;
            }
        }
        if j == i + 1
            || chars
                .get(j)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            continue;
        }
        let skip_space = |mut k: usize| {
            while chars.get(k).is_some_and(|c| c.is_whitespace()) {
                k += 1;
            }
            k
        };
        j = skip_space(j);
        if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
            j = skip_space(j + 2);
            if chars.get(j) != Some(&'<') {
                continue;
            }
            let mut depth = 0;
            while let Some(c) = chars.get(j) {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                j += 1;
                if depth == 0 {
                    break;
                }
            }
            j = skip_space(j);
        }
        if chars.get(j) != Some(&'(') {
            continue;
        }
        j = skip_space(j + 1);
        let digits = j;
        while chars.get(j).is_some_and(|c| c.is_ascii_digit()) {
            j += 1;
        }
        if j == digits {
            continue;
        }
        // An integer suffix or digit separators (`0usize`, `1_0`).
        while chars
            .get(j)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            j += 1;
        }
        if chars.get(skip_space(j)) == Some(&')') {
            lines.push(line);
        }
    }
    lines
}

/// Every positional row read under `src` outside the database layer, as
/// `path:line`.
fn positional_reads_in(src: &Path) -> Vec<String> {
    let root = src.parent().expect("src has a parent");
    let mut files = Vec::new();
    source_files(src, &["rs"], &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let name = file
            .strip_prefix(root)
            .expect("under the crate root")
            .to_string_lossy()
            .replace('\\', "/");
        if name.starts_with("src/db/") {
            continue;
        }
        let code = code_only(&fs::read_to_string(&file).expect("a source file"));
        for line in positional_reads(&code) {
            found.push(format!("{name}:{line}"));
        }
    }
    found
}

/// A cycle of the graph, as the path that closes it, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// Statements over the `channels` and `subscribers` tables (reads, writes, locks) in `src`,
/// outside the tables' own modules: `(file, statement head)` for each occurrence. A join
/// inside another owner's statement is not counted.
fn table_statements_outside_owners(src: &Path) -> Vec<(String, String)> {
    const OWNERS: [(&str, &str); 2] = [
        ("channels", "catalog/channels/"),
        ("subscribers", "access/subscribers.rs"),
    ];
    let mut files = Vec::new();
    source_files(src, &["rs"], &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(src)
            .unwrap_or(&file)
            .display()
            .to_string();
        let text = fs::read_to_string(&file).expect("a source file");
        let words: Vec<String> = text
            .split(|c: char| c.is_whitespace() || c == '"' || c == '(')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for (table, owner) in OWNERS {
            let owns = relative == owner || (owner.ends_with('/') && relative.starts_with(owner));
            if owns || relative == "layers.rs" {
                continue;
            }
            for pair in words.windows(2) {
                if pair[1] == table && matches!(pair[0].as_str(), "from" | "update" | "into") {
                    found.push((relative.clone(), format!("{} {}", pair[0], pair[1])));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
    }

    /// The pieces of an effect row's payload and key are spelled only in `effects`: a writer
    /// elsewhere splices its fragments (`effects::expiry_payload_sql!`, the key macros) instead
    /// of writing its own `to_char` format or key. (This file names the pieces, so it is left
    /// out of its own scan.)
    #[test]
    fn no_writer_spells_an_instant_or_a_key_of_its_own() {
        let src = src();
        let mut files = Vec::new();
        source_files(&src, &["rs"], &mut files);
        let pieces = [
            "to_char(",
            "jsonb_build_object('expires_at'",
            "jsonb_build_object('membership_id'",
            "':ev'",
            "'reminder:'",
            "':deleted'",
        ];
        let mut offenders = Vec::new();
        for file in files
            .iter()
            .filter(|f| !f.starts_with(src.join("outbox/effects")) && **f != src.join("layers.rs"))
        {
            let text = fs::read_to_string(file).expect("a source file");
            for piece in pieces {
                if text.contains(piece) {
                    offenders.push(format!("{}: {piece}", file.display()));
                }
            }
        }
        assert!(files.len() > 20, "the scan found the sources");
        assert!(offenders.is_empty(), "{offenders:#?}");
    }

    #[test]
    fn no_module_outside_api_refers_to_api() {
        let graph = module_graph(&src());
        assert!(graph.contains_key("api"), "the scan found the api module");
        let offenders: Vec<&String> = graph
            .iter()
            .filter(|(node, targets)| *node != "api" && targets.contains("api"))
            .map(|(node, _)| node)
            .collect();
        assert!(
            offenders.is_empty(),
            "layers point down: {offenders:?} must not refer to crate::api"
        );
    }

    /// The paths under `src/` that the README and `docs/*.md` name, each as written: a file,
    /// or a folder (ending in `/`). Braces, globs and placeholders are skipped.
    fn source_paths_in_docs() -> Vec<(String, String)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut docs = vec![root.join("README.md")];
        for entry in fs::read_dir(root.join("docs")).expect("docs/") {
            let path = entry.expect("a docs entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
        docs.sort();
        let mut found = Vec::new();
        for doc in docs {
            let text = fs::read_to_string(&doc).expect("a doc");
            let name = doc.strip_prefix(root).unwrap_or(&doc).display().to_string();
            let mut rest = text.as_str();
            while let Some(i) = rest.find("src/") {
                let before = rest[..i].chars().next_back();
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_./-*{},<>".contains(c)))
                    .unwrap_or(tail.len());
                let path = tail[..end].trim_end_matches(['.', ',']);
                rest = &tail[end.max(4)..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    || path.contains(['*', '{', '}', '<', ','])
                {
                    continue;
                }
                found.push((name.clone(), path.to_string()));
            }
        }
        found
    }

    /// The literals SQL compares a `status`, `outcome`, `state` or `kind` column with, or sets
    /// one to (`= '…'`, `<> '…'`, `IN ('…', …)`), in `src/**/*.{rs,sql}`: `(file, column
    /// word, literal)`.
    fn state_literals(src: &Path) -> Vec<(String, &'static str, String)> {
        const WORDS: [&str; 4] = ["status", "outcome", "state", "kind"];
        let mut files = Vec::new();
        source_files(src, &["rs", "sql"], &mut files);
        files.sort();
        let mut found = Vec::new();
        for file in files {
            let relative = file
                .strip_prefix(src)
                .unwrap_or(&file)
                .display()
                .to_string();
            if relative == "layers.rs" {
                continue;
            }
            let text = fs::read_to_string(&file).expect("a source file");
            for word in WORDS {
                for (at, _) in text.match_indices(word) {
                    let rest = &text[at + word.len()..];
                    if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                        continue;
                    }
                    for literal in compared_literals(rest) {
                        found.push((relative.clone(), word, literal));
                    }
                }
            }
        }
        found
    }

    /// The literals `rest` (the text after a column name) compares the column with.
    fn compared_literals(rest: &str) -> Vec<String> {
        let rest = rest.trim_start();
        let quoted = |s: &str| -> Option<(String, usize)> {
            let body = s.strip_prefix('\'')?;
            let end = body.find('\'')?;
            Some((body[..end].to_string(), end + 2))
        };
        for op in ["=", "<>", "!="] {
            if let Some(after) = rest.strip_prefix(op) {
                return quoted(after.trim_start())
                    .map(|(l, _)| vec![l])
                    .unwrap_or_default();
            }
        }
        let list = rest
            .strip_prefix("NOT IN")
            .or_else(|| rest.strip_prefix("IN"))
            .and_then(|after| after.trim_start().strip_prefix('('));
        let mut literals = Vec::new();
        if let Some(mut list) = list {
            while let Some((literal, len)) = quoted(list.trim_start()) {
                literals.push(literal);
                list = list.trim_start()[len..].trim_start();
                match list.strip_prefix(',') {
                    Some(next) => list = next,
                    None => break,
                }
            }
        }
        literals
    }

    /// Every state a statement spells is a spelling of a `text_enum!` of its column's word, so a
    /// status, outcome, state or kind has one spelling: its enum's.
    #[test]
    fn every_state_spelled_in_sql_is_a_spelling_of_its_enum() {
        use crate::{
            access::memberships, catalog::channels::TelegramStatus, catalog::plans, orders,
            outbox::effects, outbox::outbound::DeliveryStatus, payments::core::Outcome,
            payments::gateways::wayforpay::checks::State, payments::star_subscriptions,
            telegram::audits,
        };
        fn spellings<T: crate::db::TextEnum>(
            all: &[T],
            as_str: fn(T) -> &'static str,
        ) -> Vec<&'static str> {
            all.iter().map(|v| as_str(*v)).collect()
        }
        let mut known: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (word, words) in [
            (
                "status",
                spellings(&memberships::Status::ALL, memberships::Status::as_str),
            ),
            (
                "status",
                spellings(&orders::Status::ALL, orders::Status::as_str),
            ),
            (
                "status",
                spellings(&effects::Status::ALL, effects::Status::as_str),
            ),
            (
                "status",
                spellings(&audits::Status::ALL, audits::Status::as_str),
            ),
            (
                "status",
                spellings(
                    &star_subscriptions::Status::ALL,
                    star_subscriptions::Status::as_str,
                ),
            ),
            (
                "status",
                spellings(&TelegramStatus::ALL, TelegramStatus::as_str),
            ),
            (
                "status",
                spellings(&DeliveryStatus::ALL, DeliveryStatus::as_str),
            ),
            ("outcome", spellings(&Outcome::ALL, Outcome::as_str)),
            (
                "outcome",
                spellings(
                    &star_subscriptions::updates::Outcome::ALL,
                    star_subscriptions::updates::Outcome::as_str,
                ),
            ),
            ("state", spellings(&State::ALL, State::as_str)),
            (
                "state",
                spellings(
                    &crate::access::join_requests::State::ALL,
                    crate::access::join_requests::State::as_str,
                ),
            ),
            (
                "kind",
                spellings(&effects::Kind::ALL, effects::Kind::as_str),
            ),
            ("kind", spellings(&plans::Kind::ALL, plans::Kind::as_str)),
            (
                "kind",
                spellings(&crate::messages::Kind::ALL, crate::messages::Kind::as_str),
            ),
            (
                "outcome",
                spellings(
                    &crate::messages::Outcome::ALL,
                    crate::messages::Outcome::as_str,
                ),
            ),
            (
                "status",
                spellings(
                    &crate::messages::broadcasts::Status::ALL,
                    crate::messages::broadcasts::Status::as_str,
                ),
            ),
            (
                "status",
                spellings(
                    &crate::referrals::ledger::Status::ALL,
                    crate::referrals::ledger::Status::as_str,
                ),
            ),
            (
                "kind",
                spellings(
                    &crate::referrals::ledger::Kind::ALL,
                    crate::referrals::ledger::Kind::as_str,
                ),
            ),
            (
                "status",
                spellings(
                    &crate::payments::gateways::monobank::Status::ALL,
                    crate::payments::gateways::monobank::Status::as_str,
                ),
            ),
            (
                "kind",
                spellings(
                    &crate::payments::receipts::Kind::ALL,
                    crate::payments::receipts::Kind::as_str,
                ),
            ),
            (
                "state",
                spellings(
                    &crate::payments::receipts::State::ALL,
                    crate::payments::receipts::State::as_str,
                ),
            ),
        ] {
            known.entry(word).or_default().extend(words);
        }
        let found = state_literals(&src());
        assert!(found.len() > 100, "the statements spell states: {found:?}");
        let unknown: Vec<_> = found
            .into_iter()
            .filter(|(_, word, literal)| !known[word].contains(literal.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "states spelled outside their enums: {unknown:#?}"
        );
    }

    /// Every `src/…` path the docs name exists, so the docs follow the tree.
    #[test]
    fn the_docs_name_only_paths_that_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let named = source_paths_in_docs();
        assert!(named.len() > 30, "the docs name source paths: {named:?}");
        let missing: Vec<_> = named
            .into_iter()
            .filter(|(_, path)| !root.join(path).exists())
            .collect();
        assert!(
            missing.is_empty(),
            "paths the docs name that do not exist: {missing:#?}"
        );
    }

    #[test]
    fn each_folder_imports_only_the_folders_below_it() {
        let graph = module_graph(&src());
        let declared: BTreeSet<String> =
            top_level_modules(&fs::read_to_string(src().join("lib.rs")).expect("lib.rs"))
                .into_iter()
                .filter(|m| m != "layers")
                .collect();
        let listed: BTreeSet<String> = LAYERS.iter().map(|l| l.to_string()).collect();
        assert_eq!(
            declared, listed,
            "LAYERS lists every top-level module of lib.rs"
        );
        let rank = |name: &str| LAYERS.iter().position(|l| *l == name);
        let mut upward = Vec::new();
        for (node, targets) in &graph {
            let Some(from) = rank(node) else { continue };
            for target in targets {
                if rank(target).is_some_and(|to| to <= from) {
                    upward.push(format!("{node} → {target}"));
                }
            }
        }
        assert!(
            upward.is_empty(),
            "layers point down (LAYERS, docs/ARCHITECTURE.md); upward imports: {upward:#?}"
        );
    }

    #[test]
    fn the_top_level_modules_form_no_cycle() {
        let graph = module_graph(&src());
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "module cycle: {}\nthe whole graph: {graph:#?}",
                cycle.join(" → ")
            );
        }
    }

    /// The statements over `channels` and `subscribers` that stay with another owner: the lock
    /// order's reads of a channel's terms, one channel's and a plan's channels' (`orders::seats`), the subscriber key-share locks of
    /// membership changes (`memberships`), which `subscribers` cannot offer without a cycle
    /// (it calls `memberships`), a subquery of the refunds' statement, the insert of an
    /// automation's message, which takes its buyer's language in the same statement, and the
    /// mark before a message's call, which checks in the same statement that its buyer still
    /// takes such messages.
    const TABLE_STATEMENTS_ELSEWHERE: [(&str, &str, usize); 4] = [
        ("orders/seats.rs", "from channels", 4),
        ("access/memberships.rs", "from subscribers", 2),
        ("payments/refunds/mod.rs", "from subscribers", 1),
        ("messages/sent.rs", "from subscribers", 2),
    ];

    #[test]
    fn channel_and_subscriber_statements_live_in_their_modules() {
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for key in table_statements_outside_owners(&src()) {
            *counts.entry(key).or_default() += 1;
        }
        let allowed: BTreeMap<(String, String), usize> = TABLE_STATEMENTS_ELSEWHERE
            .iter()
            .map(|(file, head, n)| ((file.to_string(), head.to_string()), *n))
            .collect();
        let offenders: Vec<_> = counts
            .iter()
            .filter(|(key, n)| allowed.get(*key).is_none_or(|max| *n > max))
            .collect();
        assert!(
            offenders.is_empty(),
            "SQL over channels or subscribers belongs in src/catalog/channels/ or src/access/subscribers.rs \
             (a join inside another owner's statement aside): {offenders:?}"
        );
    }

    #[test]
    fn references_are_found_in_code_and_groups_only() {
        let code = code_only(
            r##"
            use crate::{db::{self, FromRow}, error::ApiError, memberships};
            // use crate::api::Nope;
            /* crate::api::Nor */
            let s = "crate::api::NotEither";
            let r = r#"crate::api::Neither"#;
            let c = '"';
            $crate::transaction!(x);
            let x = crate::orders::seats::lock_order;
            let y = other_crate::api::Thing;
            "##,
        );
        let found = crate_references(&code);
        let want: BTreeSet<String> = ["db", "error", "memberships", "orders", "transaction"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn rows_are_read_by_column_name_outside_db() {
        let found = positional_reads_in(&src());
        assert!(
            found.is_empty(),
            "rows are read by column name (a db::FromRow projection owned by the table's \
             module), never by position; positional reads at:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn positional_reads_are_found_in_code_only() {
        let code = code_only(
            r##"
            let a = row.get(0);
            let b: i64 = r.try_get(12)?;
            let c = r.get::<_, Option<String>>(3);
            let d = client
                .query_one(SQL, &[])
                .await?
                .try_get :: < _, Vec<i64> > ( 1_0usize )?;
            let ok1 = r.get("name");
            let ok2 = r.try_get::<_, i64>("count")?;
            let ok3 = chars.get(i + 1);
            let ok4 = map.get(&0);
            let ok5 = r.get_opt(0);
            let ok6 = widget.target(0);
            // let no = r.get(0);
            /* r.try_get(1) */
            let s = "r.get(2)";
            let t = r#"r.get(3)"#;
            "##,
        );
        assert_eq!(positional_reads(&code), vec![2, 3, 4, 8]);
    }

    #[test]
    fn cycles_are_found() {
        let edges = |pairs: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (a, b) in pairs {
                g.entry(a.to_string()).or_default().insert(b.to_string());
                g.entry(b.to_string()).or_default();
            }
            g
        };
        assert_eq!(
            find_cycle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])),
            None
        );
        let cycle = find_cycle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).unwrap();
        assert_eq!(cycle.first(), cycle.last());
        assert_eq!(cycle.len(), 4);
    }
}
