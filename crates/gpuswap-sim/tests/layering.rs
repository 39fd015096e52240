//! Layering: the module import graphs of gpuswap-core, gpuswap-sim and gpuswap-cli have
//! no circle.
//!
//! A circle among modules means none of them can be read, tested or moved without the
//! others; an upward import (a child using an item of its parent) is the commonest way
//! to make one, because the parent's `mod child;` already points down. So the rule is
//! simply "the graph is acyclic", and a failure names every strongly connected group of
//! files with the import lines that tie it together.
//!
//! The graph is read from the sources with a deliberately small scanner (a tokenizer
//! that drops comments and string contents, plus brace tracking), not with rustc:
//! - nodes are the source files reachable from the crate root through non-test
//!   `mod x;` declarations (`lib.rs` is the root, `a/mod.rs` and `a.rs` are `a`);
//!   modules declared under `#[cfg(test)]` and all `#[cfg(test)]` items are left out;
//! - edges are the `mod x;` declarations, every `use crate::…`/`use super::…`/
//!   `use self::…` path (groups expanded) and every inline `crate::…`/`super::…`/
//!   `self::…` path, each resolved to the deepest module file it names; a path to an
//!   item the crate root re-exports (`pub use x::Y` in `lib.rs`) goes to `x`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// Module directories whose files are exempt from the rule, collapsed into one node: a
/// (crate, module, reason) triple each. Only one type's `impl` split over files belongs
/// here; every other circle is to be fixed, not listed.
const COLLAPSED: &[(&str, &str, &str)] = &[(
    "gpuswap-sim",
    "engine",
    "Engine's impl blocks split over files: they share its private fields and helpers",
)];

/// The crate directory of gpuswap-sim; the other crates are its siblings.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .to_path_buf()
}

#[test]
fn sim_and_cli_have_no_import_circle() {
    let sim = Tree::new("gpuswap-sim", "lib.rs");
    let cli = Tree::new("gpuswap-cli", "main.rs");
    let report = [sim, cli].iter().map(circles_report).collect::<String>();
    assert!(report.is_empty(), "import circles:\n{report}");
}

#[test]
fn core_has_no_import_circle() {
    let report = circles_report(&Tree::new("gpuswap-core", "lib.rs"));
    assert!(report.is_empty(), "import circles:\n{report}");
}

#[test]
fn every_collapsed_directory_exists() {
    // A stale exception would silently exempt whatever is later put under its name.
    for (krate, module, _) in COLLAPSED {
        let dir = crates_dir().join(krate).join("src").join(module);
        assert!(dir.is_dir(), "{} is listed in COLLAPSED", dir.display());
    }
}

/// One crate's module tree to check.
struct Tree {
    krate: &'static str,
    src: PathBuf,
    root_file: &'static str,
}

impl Tree {
    fn new(krate: &'static str, root_file: &'static str) -> Tree {
        let src = crates_dir().join(krate).join("src");
        Tree {
            krate,
            src,
            root_file,
        }
    }
}

/// What made an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    Mod,
    Use,
    Path,
}

/// One edge with the place that made it.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    file: PathBuf,
    line: usize,
    text: String,
    via: Via,
}

/// The graph of a tree: nodes by module path ("" for the root) with their files.
struct Graph {
    files: BTreeMap<String, PathBuf>,
    edges: Vec<Edge>,
}

/// The report of every circle in `tree`, empty when there is none.
fn circles_report(tree: &Tree) -> String {
    let graph = build_graph(tree);
    let mut adjacency: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for node in graph.files.keys() {
        adjacency.entry(node).or_default();
    }
    for edge in &graph.edges {
        adjacency.entry(&edge.from).or_default().insert(&edge.to);
    }
    let mut report = String::new();
    for group in strongly_connected(&adjacency) {
        if group.len() < 2 {
            continue;
        }
        let members: BTreeSet<&str> = group.iter().copied().collect();
        let _ = writeln!(
            report,
            "{}: a circle of {} modules:",
            tree.krate,
            group.len()
        );
        for node in &members {
            let file = &graph.files[*node];
            let _ = writeln!(report, "  {} ({})", display(node), relative(file));
        }
        let _ = writeln!(report, "  shortest circle through {}:", display(group[0]));
        for edge in shortest_circle(&graph.edges, &members, group[0]) {
            let _ = writeln!(report, "    {}", describe(edge));
        }
        let _ = writeln!(report, "  every import between them:");
        let inside = graph.edges.iter().filter(|e| {
            e.via != Via::Mod
                && members.contains(e.from.as_str())
                && members.contains(e.to.as_str())
        });
        for edge in merge_groups(inside) {
            let _ = writeln!(report, "    {}", describe(&edge));
        }
    }
    report
}

fn display(node: &str) -> &str {
    if node.is_empty() { "crate" } else { node }
}

fn relative(file: &Path) -> String {
    let root = crates_dir();
    let file = file.strip_prefix(&root).unwrap_or(file);
    format!("crates/{}", file.display())
}

fn describe(edge: &Edge) -> String {
    format!(
        "{}:{}: {}  [{} -> {}]",
        relative(&edge.file),
        edge.line,
        edge.text,
        display(&edge.from),
        display(&edge.to)
    )
}

/// Joins the edges one `use` group made on one line towards one module into one edge,
/// written as the group: `use super::output::{PointRecords, value_text}`.
fn merge_groups<'a>(edges: impl Iterator<Item = &'a Edge>) -> Vec<Edge> {
    let mut merged: Vec<(Edge, Vec<String>)> = Vec::new();
    for edge in edges {
        let (prefix, item) = edge.text.rsplit_once("::").unwrap_or(("", &edge.text));
        match merged.last_mut() {
            Some((last, items))
                if last.file == edge.file
                    && last.line == edge.line
                    && last.to == edge.to
                    && last.text.rsplit_once("::").map(|(p, _)| p) == Some(prefix) =>
            {
                items.push(item.to_string());
            }
            _ => merged.push((edge.clone(), vec![item.to_string()])),
        }
    }
    merged
        .into_iter()
        .map(|(mut edge, items)| {
            if items.len() > 1 {
                let prefix = edge.text.rsplit_once("::").map_or("", |(p, _)| p);
                edge.text = format!("{prefix}::{{{}}}", items.join(", "));
            }
            edge
        })
        .collect()
}

/// Tarjan's algorithm; the groups come out with their members in visiting order.
fn strongly_connected<'a>(adjacency: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        groups: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(
        node: &'a str,
        adjacency: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        s: &mut State<'a>,
    ) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for &next in &adjacency[node] {
            if !s.index.contains_key(next) {
                visit(next, adjacency, s);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut group = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                group.push(top);
                if top == node {
                    break;
                }
            }
            group.reverse();
            s.groups.push(group);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for &node in adjacency.keys() {
        if !state.index.contains_key(node) {
            visit(node, adjacency, &mut state);
        }
    }
    state.groups
}

/// The edges of a shortest path from `start` back to itself inside `members`.
fn shortest_circle<'a>(edges: &'a [Edge], members: &BTreeSet<&str>, start: &str) -> Vec<&'a Edge> {
    let mut came_by: BTreeMap<&str, &Edge> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for edge in edges.iter().filter(|e| e.from == node) {
            if !members.contains(edge.to.as_str()) || came_by.contains_key(edge.to.as_str()) {
                continue;
            }
            came_by.insert(&edge.to, edge);
            if edge.to == start {
                let mut path = vec![edge];
                let mut at = edge.from.as_str();
                while at != start {
                    let back = came_by[at];
                    path.push(back);
                    at = &back.from;
                }
                path.reverse();
                return path;
            }
            queue.push_back(&edge.to);
        }
    }
    Vec::new()
}

/// The node a module belongs to once the collapsed directories are merged.
fn collapse(krate: &str, module: &str) -> String {
    for (k, dir, _) in COLLAPSED {
        if *k == krate && (module == *dir || module.starts_with(&format!("{dir}::"))) {
            return (*dir).to_string();
        }
    }
    module.to_string()
}

fn join(segments: &[String]) -> String {
    segments.join("::")
}

/// Reads every module file of `tree` and resolves its imports.
fn build_graph(tree: &Tree) -> Graph {
    struct Module {
        path: Vec<String>,
        file: PathBuf,
        scan: Scan,
    }
    let mut modules: Vec<Module> = Vec::new();
    let mut test_files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut mod_edges: Vec<Edge> = Vec::new();
    let mut queue = VecDeque::from([(Vec::<String>::new(), tree.src.join(tree.root_file))]);
    while let Some((path, file)) = queue.pop_front() {
        let source =
            fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let scanned = scan(&source);
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let owns_directory = path.is_empty() || name == "mod.rs";
        let dir = if owns_directory {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for test_mod in &scanned.test_mods {
            match &test_mod.path_attr {
                Some(p) => test_files.insert(file.parent().unwrap().join(p)),
                None => {
                    let base = test_mod.inline.iter().fold(dir.clone(), |d, m| d.join(m));
                    test_files.insert(base.join(format!("{}.rs", test_mod.name)));
                    test_files.insert(base.join(&test_mod.name).join("mod.rs"))
                }
            };
        }
        for decl in &scanned.mods {
            let base = decl.inline.iter().fold(dir.clone(), |d, m| d.join(m));
            let flat = base.join(format!("{}.rs", decl.name));
            let nested = base.join(&decl.name).join("mod.rs");
            let child_file = match (flat.is_file(), nested.is_file()) {
                (true, false) => flat,
                (false, true) => nested,
                _ => panic!(
                    "{}:{}: mod {} has no single file",
                    file.display(),
                    decl.line,
                    decl.name
                ),
            };
            let mut child: Vec<String> = path.clone();
            child.extend(decl.inline.iter().cloned());
            child.push(decl.name.clone());
            mod_edges.push(Edge {
                from: join(&path),
                to: join(&child),
                file: file.clone(),
                line: decl.line,
                text: format!("mod {};", decl.name),
                via: Via::Mod,
            });
            queue.push_back((child, child_file));
        }
        modules.push(Module {
            path,
            file,
            scan: scanned,
        });
    }

    // Every file in the directory is a module or a test: a file the walk did not reach
    // means the scanner missed a declaration, and its imports would go unchecked.
    let reached: BTreeSet<&PathBuf> = modules.iter().map(|m| &m.file).collect();
    for file in rust_files(&tree.src) {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let is_test =
            name == "tests.rs" || name.ends_with("_tests.rs") || test_files.contains(&file);
        assert!(
            reached.contains(&file) || is_test,
            "{} is neither a module reached from {} nor a test file",
            file.display(),
            tree.root_file
        );
    }

    let files: BTreeMap<String, PathBuf> = modules
        .iter()
        .map(|m| (join(&m.path), m.file.clone()))
        .collect();
    let root_exports: BTreeMap<String, Vec<String>> = modules[0]
        .scan
        .imports
        .iter()
        .filter(|i| i.reexport && i.inline.is_empty() && i.name != "*")
        .map(|i| (i.name.clone(), i.segments.clone()))
        .collect();
    let resolver = Resolver {
        files: &files,
        root_exports: &root_exports,
    };

    let mut edges = Vec::new();
    for module in &modules {
        for import in &module.scan.imports {
            let mut here = module.path.clone();
            here.extend(import.inline.iter().cloned());
            let Some(target) = resolver.resolve(&here, &import.segments) else {
                continue;
            };
            let text = match import.via {
                Via::Use => format!("use {}", join(&import.segments)),
                _ => join(&import.segments),
            };
            edges.push(Edge {
                from: join(&module.path),
                to: target,
                file: module.file.clone(),
                line: import.line,
                text,
                via: import.via,
            });
        }
    }
    edges.splice(0..0, mod_edges);

    let edges = edges
        .into_iter()
        .map(|mut e| {
            e.from = collapse(tree.krate, &e.from);
            e.to = collapse(tree.krate, &e.to);
            e
        })
        .filter(|e| e.from != e.to)
        .collect();
    let mut nodes = BTreeMap::new();
    for (module, file) in files {
        let node = collapse(tree.krate, &module);
        // A collapsed directory is shown by its own file (`engine/mod.rs`).
        if node == module || !nodes.contains_key(&node) {
            nodes.insert(node, file);
        }
    }
    Graph {
        files: nodes,
        edges,
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Turns `crate::`/`super::`/`self::` paths into the module files they name.
struct Resolver<'a> {
    files: &'a BTreeMap<String, PathBuf>,
    root_exports: &'a BTreeMap<String, Vec<String>>,
}

impl Resolver<'_> {
    /// The deepest module file `segments`, written in module `here` (inline modules
    /// included), names; `None` for paths into other crates.
    fn resolve(&self, here: &[String], segments: &[String]) -> Option<String> {
        let mut full: Vec<String> = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super") | Some("self") => here.to_vec(),
            _ => return None,
        };
        let mut rest = if segments[0] == "crate" {
            &segments[1..]
        } else {
            segments
        };
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => {
                    full.pop().expect("super:: above the crate root");
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
        full.extend(rest.iter().cloned());
        let deepest = self.deepest(&full);
        if deepest == 0
            && let Some(first) = full.first()
            && let Some(export) = self.root_exports.get(first)
        {
            let mut via_export = export.clone();
            via_export.extend(full[1..].iter().cloned());
            let k = self.deepest(&via_export);
            return Some(join(&via_export[..k]));
        }
        Some(join(&full[..deepest]))
    }

    /// How many leading segments of `path` name a module file.
    fn deepest(&self, path: &[String]) -> usize {
        (0..=path.len())
            .rev()
            .find(|&k| self.files.contains_key(&join(&path[..k])))
            .unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------
// The scanner.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    /// `::`
    PathSep,
    /// A string literal; its text is kept only for `#[path = "…"]`.
    Str(String),
    /// A number or char literal.
    Literal,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Splits Rust source into the tokens the scanner needs; comments are dropped and
/// literals reduced to one token, so braces and `crate::` inside them do not count.
fn tokenize(source: &str) -> Vec<Token> {
    let c: Vec<char> = source.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let start_line = line;
        let mut push = |tok: Tok| {
            tokens.push(Token {
                tok,
                line: start_line,
            })
        };
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((hashes, body)) = raw_string_start(&c, i) {
            let mut j = body;
            let closes = |j: usize| c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#');
            while j < c.len() && !closes(j) {
                if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            push(Tok::Str(c[body..j.min(c.len())].iter().collect()));
            i = j + 1 + hashes;
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            let body = if ch == '"' { i + 1 } else { i + 2 };
            let mut j = body;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                if at(j) == '\n' {
                    line += 1;
                }
                j += 1;
            }
            push(Tok::Str(c[body..j.min(c.len())].iter().collect()));
            i = j + 1;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            let q = if ch == '\'' { i } else { i + 1 };
            if at(q + 1) == '\\' {
                let mut j = q + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                push(Tok::Literal);
                i = j + 1;
            } else if at(q + 2) == '\'' {
                push(Tok::Literal);
                i = q + 3;
            } else {
                // A lifetime: the quote alone, its name follows as an identifier.
                push(Tok::Punct('\''));
                i = q + 1;
            }
        } else if ch == 'r' && at(i + 1) == '#' && is_ident_start(at(i + 2)) {
            let mut j = i + 2;
            while is_ident_continue(at(j)) {
                j += 1;
            }
            push(Tok::Ident(c[i + 2..j].iter().collect()));
            i = j;
        } else if is_ident_start(ch) {
            let mut j = i;
            while is_ident_continue(at(j)) {
                j += 1;
            }
            push(Tok::Ident(c[i..j].iter().collect()));
            i = j;
        } else if ch.is_ascii_digit() {
            while is_ident_continue(at(i)) {
                i += 1;
            }
            push(Tok::Literal);
        } else if ch == ':' && at(i + 1) == ':' {
            push(Tok::PathSep);
            i += 2;
        } else {
            push(Tok::Punct(ch));
            i += 1;
        }
    }
    tokens
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// For a raw string (`r"`, `r#"`, `br#"`…) at `i`: its `#` count and where its text starts.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// A file module declared with `mod name;`.
#[derive(Debug, PartialEq)]
struct ModDecl {
    name: String,
    line: usize,
    /// The inline (`mod x { … }`) modules it is declared in.
    inline: Vec<String>,
}

/// A module declared under `#[cfg(test)]`.
#[derive(Debug, PartialEq)]
struct TestMod {
    name: String,
    inline: Vec<String>,
    path_attr: Option<String>,
}

/// One path of a `use` or an inline path expression.
#[derive(Debug, PartialEq)]
struct Import {
    segments: Vec<String>,
    /// The name it is visible under (`*` for a glob).
    name: String,
    line: usize,
    inline: Vec<String>,
    via: Via,
    /// Part of a `pub use` (`pub(crate) use` and the like included).
    reexport: bool,
}

/// What the scanner finds in one file's non-test code.
#[derive(Debug, Default)]
struct Scan {
    mods: Vec<ModDecl>,
    test_mods: Vec<TestMod>,
    imports: Vec<Import>,
}

fn scan(source: &str) -> Scan {
    let t = tokenize(source);
    let tok = |i: usize| t.get(i).map(|t| &t.tok);
    let is_ident = |i: usize, s: &str| matches!(tok(i), Some(Tok::Ident(x)) if x == s);
    let is_punct = |i: usize, p: char| tok(i) == Some(&Tok::Punct(p));
    let mut out = Scan::default();
    // One entry per open brace: the inline module it opens, if it does.
    let mut braces: Vec<Option<String>> = Vec::new();
    let inline =
        |braces: &Vec<Option<String>>| braces.iter().flatten().cloned().collect::<Vec<_>>();
    let mut test_item = false;
    let mut path_attr: Option<String> = None;
    let mut i = 0;
    while i < t.len() {
        // Attributes: remember `cfg(test)` and `path = "…"` for the item they precede.
        if is_punct(i, '#') {
            let open = if is_punct(i + 1, '!') { i + 2 } else { i + 1 };
            if is_punct(open, '[') {
                let close = matching(&t, open);
                let inner: Vec<&Tok> = t[open + 1..close].iter().map(|t| &t.tok).collect();
                let cfg_test = [
                    Tok::Ident("cfg".into()),
                    Tok::Punct('('),
                    Tok::Ident("test".into()),
                    Tok::Punct(')'),
                ];
                if inner.len() == 4 && inner.iter().zip(&cfg_test).all(|(a, b)| *a == b) {
                    test_item = true;
                }
                if let [Tok::Ident(p), Tok::Punct('='), Tok::Str(s)] = inner.as_slice()
                    && p == "path"
                {
                    path_attr = Some(s.clone());
                }
                i = close + 1;
                continue;
            }
        }
        if test_item {
            let mut j = i;
            if is_ident(j, "pub") {
                j += 1;
                if is_punct(j, '(') {
                    j = matching(&t, j) + 1;
                }
            }
            if is_ident(j, "mod")
                && let Some(Tok::Ident(name)) = tok(j + 1)
            {
                out.test_mods.push(TestMod {
                    name: name.clone(),
                    inline: inline(&braces),
                    path_attr: path_attr.take(),
                });
            }
            i = skip_item(&t, i);
            test_item = false;
            path_attr = None;
            continue;
        }
        match tok(i) {
            Some(Tok::Ident(word)) if word == "mod" => {
                if let Some(Tok::Ident(name)) = tok(i + 1) {
                    if is_punct(i + 2, ';') {
                        assert!(
                            path_attr.is_none(),
                            "line {}: #[path] on a non-test module is not supported",
                            t[i].line
                        );
                        out.mods.push(ModDecl {
                            name: name.clone(),
                            line: t[i].line,
                            inline: inline(&braces),
                        });
                        i += 3;
                        continue;
                    }
                    if is_punct(i + 2, '{') {
                        braces.push(Some(name.clone()));
                        i += 3;
                        continue;
                    }
                }
            }
            Some(Tok::Ident(word)) if word == "use" => {
                let reexport = is_ident(i.wrapping_sub(1), "pub")
                    || (is_punct(i.wrapping_sub(1), ')') && {
                        let mut k = i - 1;
                        while k > 0 && !is_punct(k, '(') {
                            k -= 1;
                        }
                        is_ident(k.wrapping_sub(1), "pub")
                    });
                let mut end = i + 1;
                while end < t.len() && !is_punct(end, ';') {
                    end += 1;
                }
                let mut pos = i + 1;
                let mut paths = Vec::new();
                use_tree(&t[..end], &mut pos, Vec::new(), &mut paths);
                for (segments, name, line) in paths {
                    out.imports.push(Import {
                        segments,
                        name,
                        line,
                        inline: inline(&braces),
                        via: Via::Use,
                        reexport,
                    });
                }
                i = end + 1;
                path_attr = None;
                continue;
            }
            Some(Tok::Ident(word))
                if matches!(word.as_str(), "crate" | "super" | "self")
                    && tok(i + 1) == Some(&Tok::PathSep)
                    && !is_punct(i.wrapping_sub(1), '$') =>
            {
                let mut segments = vec![word.clone()];
                let mut j = i + 1;
                while tok(j) == Some(&Tok::PathSep)
                    && let Some(Tok::Ident(s)) = tok(j + 1)
                {
                    segments.push(s.clone());
                    j += 2;
                }
                out.imports.push(Import {
                    name: segments.last().unwrap().clone(),
                    segments,
                    line: t[i].line,
                    inline: inline(&braces),
                    via: Via::Path,
                    reexport: false,
                });
                i = j;
                continue;
            }
            Some(Tok::Punct('{')) => braces.push(None),
            Some(Tok::Punct('}')) => {
                braces.pop();
            }
            _ => {}
        }
        if matches!(tok(i), Some(Tok::Punct(';' | '{' | '}'))) {
            path_attr = None;
        }
        i += 1;
    }
    out
}

/// The index of the bracket closing the one at `open`.
fn matching(t: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (k, token) in t.iter().enumerate().skip(open) {
        match token.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced bracket at line {}", t[open].line)
}

/// The index after the item (or field, statement, match arm) starting at `i`: after its
/// `;` or `,`, after its braced body, or at the bracket that closes its surroundings.
fn skip_item(t: &[Token], i: usize) -> usize {
    let mut depth = 0usize;
    let mut k = i;
    while k < t.len() {
        match t[k].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(c @ (')' | ']' | '}')) => {
                if depth == 0 {
                    return k;
                }
                depth -= 1;
                if depth == 0 && c == '}' {
                    return k + 1;
                }
            }
            Tok::Punct(';' | ',') if depth == 0 => return k + 1,
            _ => {}
        }
        k += 1;
    }
    k
}

/// Expands the use tree at `pos` (ending at the end of `t`) into full paths, each with
/// the name it is visible under and the line of its last segment.
fn use_tree(
    t: &[Token],
    pos: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, String, usize)>,
) {
    let mut path = prefix;
    if t.get(*pos).map(|t| &t.tok) == Some(&Tok::PathSep) {
        *pos += 1;
    }
    while let Some(token) = t.get(*pos) {
        let line = token.line;
        match &token.tok {
            Tok::Ident(segment) => {
                path.push(segment.clone());
                *pos += 1;
                let mut name = segment.clone();
                if matches!(t.get(*pos).map(|t| &t.tok), Some(Tok::Ident(a)) if a == "as") {
                    if let Some(Tok::Ident(alias)) = t.get(*pos + 1).map(|t| &t.tok) {
                        name = alias.clone();
                    }
                    *pos += 2;
                }
                if t.get(*pos).map(|t| &t.tok) == Some(&Tok::PathSep) {
                    *pos += 1;
                    continue;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                    if name == "self" {
                        name = path.last().cloned().unwrap_or_default();
                    }
                }
                out.push((path, name, line));
                return;
            }
            Tok::Punct('*') => {
                *pos += 1;
                out.push((path, "*".into(), line));
                return;
            }
            Tok::Punct('{') => {
                *pos += 1;
                while let Some(token) = t.get(*pos) {
                    match token.tok {
                        Tok::Punct('}') => {
                            *pos += 1;
                            return;
                        }
                        Tok::Punct(',') => *pos += 1,
                        _ => use_tree(t, pos, path.clone(), out),
                    }
                }
                return;
            }
            _ => {
                *pos += 1;
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Tests of the scanner itself, so that a regression in it cannot pass silently.

fn imports(source: &str) -> Vec<String> {
    scan(source)
        .imports
        .iter()
        .map(|i| format!("{}@{}", join(&i.segments), i.line))
        .collect()
}

#[test]
fn scanner_expands_grouped_uses() {
    let source = "use crate::{a::X, b::{self, c::Y as Z}, d::*};\nuse super::Foo;\n";
    assert_eq!(
        imports(source),
        [
            "crate::a::X@1",
            "crate::b@1",
            "crate::b::c::Y@1",
            "crate::d@1",
            "super::Foo@2"
        ]
    );
    let names: Vec<String> = scan(source).imports.into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["X", "b", "Z", "*", "Foo"]);
}

#[test]
fn scanner_finds_inline_paths_but_not_in_comments_or_strings() {
    let source = "// crate::commented::X\n\
                  fn f() -> u64 {\n    \
                  let s = \"crate::in_string {\";\n    \
                  super::super::g() + crate::policy::gpuswap::victim::VICTIMS\n\
                  }\n\
                  pub(crate) fn h<'a>(x: &'a str) -> char { '{' }\n\
                  macro_rules! m { () => { $crate::ignored } }\n";
    assert_eq!(
        imports(source),
        [
            "super::super::g@4",
            "crate::policy::gpuswap::victim::VICTIMS@4"
        ]
    );
}

#[test]
fn scanner_skips_cfg_test_items() {
    let source = "mod real;\n\
                  #[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::x::Y;\n}\n\
                  #[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod a_tests;\n\
                  #[cfg(test)]\nuse crate::only_in_tests::{A, B};\n\
                  struct S {\n    #[cfg(test)]\n    f: crate::t::T,\n    g: crate::kept::K,\n}\n";
    let scanned = scan(source);
    assert_eq!(
        scanned.mods,
        [ModDecl {
            name: "real".into(),
            line: 1,
            inline: vec![],
        }]
    );
    let test_mods: Vec<(&str, Option<&str>)> = scanned
        .test_mods
        .iter()
        .map(|m| (m.name.as_str(), m.path_attr.as_deref()))
        .collect();
    assert_eq!(
        test_mods,
        [("tests", None), ("a_tests", Some("a_tests.rs"))]
    );
    assert_eq!(imports(source), ["crate::kept::K@15"]);
}

#[test]
fn scanner_tracks_inline_modules_for_super() {
    let source = "mod common {\n    pub const X: u64 = super::MIB;\n    mod deeper;\n}\n\
                  pub use inner::Item;\n";
    let scanned = scan(source);
    assert_eq!(scanned.imports[0].inline, ["common"]);
    assert_eq!(scanned.mods[0].inline, ["common"]);
    assert!(scanned.imports[1].reexport);
    assert_eq!(scanned.imports[1].segments, ["inner", "Item"]);
}

#[test]
fn resolver_picks_the_deepest_module_file() {
    let files: BTreeMap<String, PathBuf> = ["", "a", "a::b", "policy", "policy::gpuswap", "x"]
        .iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    let exports = BTreeMap::from([("Y".to_string(), vec!["x".to_string(), "Y".to_string()])]);
    let resolver = Resolver {
        files: &files,
        root_exports: &exports,
    };
    let seg = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let at = |here: &str, path: &str| resolver.resolve(&seg(here), &seg(path));
    assert_eq!(
        at("a", "crate::policy::gpuswap::victim::VICTIMS").as_deref(),
        Some("policy::gpuswap")
    );
    assert_eq!(at("a::b", "super::Foo").as_deref(), Some("a"));
    assert_eq!(at("a::b", "super::super::MIB").as_deref(), Some(""));
    assert_eq!(at("a::b", "crate::Y").as_deref(), Some("x"));
    assert_eq!(at("a::b", "crate::MIB").as_deref(), Some(""));
    assert_eq!(at("a::b::inline", "super::Z").as_deref(), Some("a::b"));
    assert_eq!(at("a", "std::fmt").as_deref(), None);
}
