//! Which workspace crate may use which: the edges a crate's `Cargo.toml` and its sources
//! make, checked against a table of allowed edges and a list of forbidden ones.

use std::path::{Path, PathBuf};

use crate::refs::Reference;
use crate::workspace::relative;

/// The dependency tables of a manifest an edge can come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// `[dependencies]` and `[build-dependencies]`: what the shipped code links.
    Normal,
    /// `[dev-dependencies]`: what tests, benches and examples may add.
    Dev,
}

impl Section {
    fn tables(self) -> &'static [&'static str] {
        match self {
            Section::Normal => &["dependencies", "build-dependencies"],
            Section::Dev => &["dev-dependencies"],
        }
    }
}

/// One crate using another, with the place that says so.
#[derive(Clone, Debug, PartialEq)]
pub struct CrateEdge {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
    pub line: usize,
    /// The manifest entry or the path that made it.
    pub what: String,
}

/// An edge no table may allow, with the reason.
pub struct Forbidden {
    pub from: &'static str,
    pub to: &'static str,
    pub why: &'static str,
}

/// Allowed edges: each crate with the workspace crates it may use.
pub type Table<'a> = &'a [(&'a str, &'a [&'a str])];

/// The workspace crates (named in `workspace`) that the manifest `text` of crate `krate`
/// depends on in `section`'s tables, top-level and `[target.….dependencies]` alike;
/// renamed dependencies count by their `package`.
pub fn manifest_edges(
    krate: &str,
    manifest: &Path,
    text: &str,
    section: Section,
    workspace: &[&str],
) -> Vec<CrateEdge> {
    let doc: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut places: Vec<&toml::Table> = vec![&doc];
    if let Some(targets) = doc.get("target").and_then(|t| t.as_table()) {
        places.extend(targets.values().filter_map(|t| t.as_table()));
    }
    let mut edges = Vec::new();
    for place in places {
        for table in section.tables() {
            let Some(deps) = place.get(*table).and_then(|d| d.as_table()) else {
                continue;
            };
            for (key, value) in deps {
                let package = value.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                if workspace.contains(&package) && package != krate {
                    edges.push(CrateEdge {
                        from: krate.into(),
                        to: package.into(),
                        file: manifest.into(),
                        line: key_line(text, table, key),
                        what: format!("[{table}] {key}"),
                    });
                }
            }
        }
    }
    edges.sort_by_key(|e| e.line);
    edges
}

/// The line of dependency `key` in `table` (`dependencies`) of a manifest, 1 when it
/// cannot be told.
fn key_line(text: &str, table: &str, key: &str) -> usize {
    let mut header = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            header = h.to_string();
            if header == format!("{table}.{key}") || header.ends_with(&format!(".{table}.{key}")) {
                return n + 1;
            }
            continue;
        }
        let in_table = header == table || header.ends_with(&format!(".{table}"));
        let names_key = line
            .strip_prefix(key)
            .is_some_and(|rest| rest.starts_with([' ', '=', '.']));
        if in_table && names_key {
            return n + 1;
        }
    }
    1
}

/// The workspace crates (named in `workspace`) among `refs`, the references of `file` of
/// crate `krate`.
pub fn source_edges(
    krate: &str,
    file: &Path,
    refs: &[Reference],
    workspace: &[&str],
) -> Vec<CrateEdge> {
    refs.iter()
        .filter_map(|r| {
            let to = workspace
                .iter()
                .find(|w| **w != krate && w.replace('-', "_") == r.segments[0])?;
            Some(CrateEdge {
                from: krate.into(),
                to: (*to).into(),
                file: file.into(),
                line: r.line,
                what: r.segments.join("::"),
            })
        })
        .collect()
}

/// Whether `table` lets `from` use `to`.
pub fn allows(table: Table, from: &str, to: &str) -> bool {
    table
        .iter()
        .any(|(k, deps)| *k == from && deps.contains(&to))
}

/// One line per edge that `table` does not allow, naming the crate, the file, the line
/// and the forbidden rule it breaks, if any.
pub fn violations(edges: &[CrateEdge], table: Table, forbidden: &[Forbidden]) -> Vec<String> {
    edges
        .iter()
        .filter(|e| !allows(table, &e.from, &e.to))
        .map(|e| {
            let rule = forbidden
                .iter()
                .find(|f| f.from == e.from && f.to == e.to)
                .map_or("not in the allowed table".to_string(), |f| {
                    format!("forbidden: {}", f.why)
                });
            format!(
                "{} uses {} at {}:{} ({}): {rule}",
                e.from,
                e.to,
                relative(&e.file),
                e.line,
                e.what
            )
        })
        .collect()
}

/// One line per forbidden edge that `table` allows anyway.
pub fn forbidden_in_table(table: Table, forbidden: &[Forbidden]) -> Vec<String> {
    forbidden
        .iter()
        .filter(|f| allows(table, f.from, f.to))
        .map(|f| format!("the table allows {} -> {}: {}", f.from, f.to, f.why))
        .collect()
}

/// One line per allowed edge that no manifest edge in `edges` makes: the table states the
/// dependencies as they are, so an edge that went away leaves the table too.
pub fn stale_entries(table: Table, edges: &[CrateEdge]) -> Vec<String> {
    table
        .iter()
        .flat_map(|(from, deps)| deps.iter().map(move |to| (*from, *to)))
        .filter(|(from, to)| !edges.iter().any(|e| e.from == *from && e.to == *to))
        .map(|(from, to)| format!("{from} -> {to} is in the table but not in {from}'s Cargo.toml"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::references;
    use crate::source::parse_without_tests;

    const WORKSPACE: &[&str] = &["gpuswap-core", "gpuswap-wire", "gpuswap-units"];
    const TABLE: Table = &[
        ("gpuswap-core", &[]),
        ("gpuswap-wire", &["gpuswap-units"]),
        ("gpuswap-units", &[]),
    ];
    const FORBIDDEN: &[Forbidden] = &[Forbidden {
        from: "gpuswap-wire",
        to: "gpuswap-core",
        why: "the protocol stands alone",
    }];

    const MANIFEST: &str = "[package]\nname = \"gpuswap-wire\"\n\n\
                            [dependencies]\nserde.workspace = true\ngpuswap-units.workspace = true\n\
                            base = { package = \"gpuswap-core\", path = \"../gpuswap-core\" }\n\n\
                            [dev-dependencies]\ngpuswap-core = { path = \"../gpuswap-core\" }\n";

    #[test]
    fn manifest_edges_carry_their_lines_and_sections() {
        let path = Path::new("/w/Cargo.toml");
        let normal = manifest_edges("gpuswap-wire", path, MANIFEST, Section::Normal, WORKSPACE);
        let found: Vec<(&str, usize)> = normal.iter().map(|e| (e.to.as_str(), e.line)).collect();
        assert_eq!(found, [("gpuswap-units", 6), ("gpuswap-core", 7)]);
        let dev = manifest_edges("gpuswap-wire", path, MANIFEST, Section::Dev, WORKSPACE);
        assert_eq!(dev.len(), 1);
        assert_eq!(dev[0].line, 10);
    }

    #[test]
    fn a_forbidden_edge_is_named_with_its_rule() {
        let path = Path::new("/w/Cargo.toml");
        let edges = manifest_edges("gpuswap-wire", path, MANIFEST, Section::Normal, WORKSPACE);
        let found = violations(&edges, TABLE, FORBIDDEN);
        assert_eq!(
            found,
            [
                "gpuswap-wire uses gpuswap-core at /w/Cargo.toml:7 ([dependencies] base): \
              forbidden: the protocol stands alone"
            ]
        );
    }

    #[test]
    fn source_edges_come_from_uses_paths_and_macros() {
        let source = "use gpuswap_units::Size;\n\
                      fn f() { let _ = gpuswap_core::MIB; println!(\"{}\", gpuswap_core::KIB); }\n\
                      #[cfg(test)]\nmod tests { use gpuswap_core::Only; }\n";
        let path = Path::new("/w/src/lib.rs");
        let ast = parse_without_tests(path, source);
        let edges = source_edges("gpuswap-wire", path, &references(&ast), WORKSPACE);
        let found: Vec<(&str, usize)> = edges.iter().map(|e| (e.to.as_str(), e.line)).collect();
        assert_eq!(
            found,
            [
                ("gpuswap-units", 1),
                ("gpuswap-core", 2),
                ("gpuswap-core", 2)
            ]
        );
        let bad = violations(&edges, TABLE, FORBIDDEN);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(
            bad[0].contains("/w/src/lib.rs:2 (gpuswap_core::MIB)"),
            "{bad:?}"
        );
    }

    #[test]
    fn the_table_itself_is_checked() {
        let loose: Table = &[("gpuswap-wire", &["gpuswap-core", "gpuswap-units"])];
        assert_eq!(forbidden_in_table(loose, FORBIDDEN).len(), 1);
        let edges = [CrateEdge {
            from: "gpuswap-wire".into(),
            to: "gpuswap-units".into(),
            file: PathBuf::new(),
            line: 1,
            what: String::new(),
        }];
        assert_eq!(
            stale_entries(loose, &edges),
            ["gpuswap-wire -> gpuswap-core is in the table but not in gpuswap-wire's Cargo.toml"]
        );
    }
}
