//! A crate's module import graph and its circles.
//!
//! A circle among modules means none of them can be read, tested or moved without the
//! others; an upward import (a child using an item of its parent) is the commonest way
//! to make one, because the parent's `mod child;` already points down. So the rule is
//! simply "the graph is acyclic", and a failure names every strongly connected group of
//! files with the import lines that tie it together.
//!
//! - nodes are the source files reachable from the crate root through non-test
//!   `mod x;` declarations (`lib.rs` is the root, `a/mod.rs` and `a.rs` are `a`);
//!   test-only code is left out;
//! - edges are the `mod x;` declarations, every `use crate::…`/`use super::…`/
//!   `use self::…` path (groups expanded) and every `crate::…`/`super::…`/`self::…` path
//!   in code or in a macro call, each resolved to the deepest module file it names; a
//!   path to an item the crate root re-exports (`pub use x::Y` in the root) goes to `x`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::refs::{Reference, Via, references};
use crate::source::{Reader, Tree, walk};
use crate::workspace::relative;

/// A module directory whose files count as one node: one type's `impl` split over files.
pub struct Collapsed {
    pub krate: &'static str,
    /// The directory, as a module path from the crate root (`engine`).
    pub module: &'static str,
    pub why: &'static str,
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

/// The graph of a crate: nodes by module path ("" for the root) with their files.
struct Graph {
    files: BTreeMap<String, PathBuf>,
    edges: Vec<Edge>,
}

/// The module tree of the crate rooted at `root_file` with every module's references.
pub fn import_tree(root_file: &Path, read: Reader) -> Tree<Vec<Reference>> {
    walk(root_file, read, &|_, ast| references(ast))
}

/// One circle: a strongly connected group of modules.
pub struct Circle {
    /// Its modules' paths, sorted (`crate` for the root).
    pub members: Vec<String>,
    /// What to show: the modules with their files, a shortest circle and every import
    /// between them.
    pub report: String,
}

/// Every circle in the module graph of `tree`, a crate named `krate`; `collapsed` lists
/// the module directories of this crate that count as one node.
pub fn circles(krate: &str, tree: &Tree<Vec<Reference>>, collapsed: &[&str]) -> Vec<Circle> {
    let graph = build_graph(tree, collapsed);
    let mut adjacency: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for node in graph.files.keys() {
        adjacency.entry(node).or_default();
    }
    for edge in &graph.edges {
        adjacency.entry(&edge.from).or_default().insert(&edge.to);
    }
    let mut found = Vec::new();
    for group in strongly_connected(&adjacency) {
        if group.len() < 2 {
            continue;
        }
        let members: BTreeSet<&str> = group.iter().copied().collect();
        let mut report = String::new();
        let _ = writeln!(report, "{krate}: a circle of {} modules:", group.len());
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
        let mut names: Vec<String> = members.iter().map(|m| display(m).to_string()).collect();
        names.sort();
        found.push(Circle {
            members: names,
            report,
        });
    }
    found
}

/// The Rust files among `all_files` (a crate's `src`) that are neither modules of `tree`
/// nor tests: a module the walk missed would have its imports go unchecked.
pub fn unreached_files<T>(tree: &Tree<T>, all_files: &[PathBuf]) -> Vec<PathBuf> {
    let reached: BTreeSet<&PathBuf> = tree.modules.iter().map(|m| &m.file).collect();
    all_files
        .iter()
        .filter(|f| {
            !reached.contains(f)
                && !crate::source::is_test_file_name(f)
                && !tree.test_files.contains(*f)
        })
        .cloned()
        .collect()
}

fn display(node: &str) -> &str {
    if node.is_empty() { "crate" } else { node }
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
fn collapse(collapsed: &[&str], module: &str) -> String {
    for dir in collapsed {
        if module == *dir || module.starts_with(&format!("{dir}::")) {
            return (*dir).to_string();
        }
    }
    module.to_string()
}

fn join(segments: &[String]) -> String {
    segments.join("::")
}

/// Resolves every module's imports into edges between module files.
fn build_graph(tree: &Tree<Vec<Reference>>, collapsed: &[&str]) -> Graph {
    let files: BTreeMap<String, PathBuf> = tree
        .modules
        .iter()
        .map(|m| (join(&m.path), m.file.clone()))
        .collect();
    let root_exports: BTreeMap<String, Vec<String>> = tree.modules[0]
        .facts
        .iter()
        .filter(|i| i.via == Via::Use && i.reexport && i.inline.is_empty() && i.name != "*")
        .map(|i| (i.name.clone(), i.segments.clone()))
        .collect();
    let resolver = Resolver {
        files: &files,
        root_exports: &root_exports,
    };
    let mut edges = Vec::new();
    for module in &tree.modules {
        for decl in &module.decls {
            let mut child = module.path.clone();
            child.extend(decl.inline.iter().cloned());
            child.push(decl.name.clone());
            edges.push(Edge {
                from: join(&module.path),
                to: join(&child),
                file: module.file.clone(),
                line: decl.line,
                text: format!("mod {};", decl.name),
                via: Via::Mod,
            });
        }
    }
    for module in &tree.modules {
        for import in &module.facts {
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
    let edges = edges
        .into_iter()
        .map(|mut e| {
            e.from = collapse(collapsed, &e.from);
            e.to = collapse(collapsed, &e.to);
            e
        })
        .filter(|e| e.from != e.to)
        .collect();
    let mut nodes = BTreeMap::new();
    for (module, file) in files {
        let node = collapse(collapsed, &module);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tests::memory;

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

    /// A crate whose `a` and `b` import each other, and whose `c` imports `a` only.
    const CIRCLE: &[(&str, &str)] = &[
        ("/k/src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("/k/src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("/k/src/b.rs", "pub struct B(crate::a::A);\n"),
        ("/k/src/c.rs", "use super::a::A;\n"),
    ];

    /// The reports of the circles in the crate of `files` rooted at `/k/src/lib.rs`.
    fn report(files: &[(&str, &str)], collapsed: &[&str]) -> String {
        let tree = import_tree(Path::new("/k/src/lib.rs"), &memory(files));
        circles("k", &tree, collapsed)
            .into_iter()
            .map(|c| c.report)
            .collect()
    }

    #[test]
    fn a_circle_is_reported_with_its_imports() {
        let tree = import_tree(Path::new("/k/src/lib.rs"), &memory(CIRCLE));
        let found = circles("k", &tree, &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].members, ["a", "b"]);
        let report = &found[0].report;
        assert!(report.contains("k: a circle of 2 modules"), "{report}");
        assert!(
            report.contains("/k/src/a.rs:1: use crate::b::B  [a -> b]"),
            "{report}"
        );
        assert!(
            report.contains("/k/src/b.rs:1: crate::a::A  [b -> a]"),
            "{report}"
        );
        assert!(!report.contains("c.rs"), "{report}");
    }

    #[test]
    fn an_acyclic_crate_reports_nothing() {
        let mut files = CIRCLE.to_vec();
        files[2] = ("/k/src/b.rs", "pub struct B;\n");
        assert_eq!(report(&files, &[]), "");
    }

    #[test]
    fn a_collapsed_directory_is_one_node() {
        let files = [
            ("/k/src/lib.rs", "mod engine;\n"),
            ("/k/src/engine/mod.rs", "mod step;\npub struct Engine;\n"),
            (
                "/k/src/engine/step.rs",
                "impl super::Engine { fn f() {} }\n",
            ),
        ];
        assert!(!report(&files, &[]).is_empty());
        assert_eq!(report(&files, &["engine"]), "");
    }

    #[test]
    fn a_file_outside_the_module_tree_is_found() {
        let tree = import_tree(Path::new("/k/src/lib.rs"), &memory(CIRCLE));
        let all: Vec<PathBuf> = ["lib", "a", "b", "c", "orphan", "x_tests"]
            .iter()
            .map(|n| PathBuf::from(format!("/k/src/{n}.rs")))
            .collect();
        let unreached = unreached_files(&tree, &all);
        assert_eq!(unreached, [PathBuf::from("/k/src/orphan.rs")]);
    }
}
