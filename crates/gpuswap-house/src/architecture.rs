//! The claims a Markdown map makes in its `code spans`: the paths and the types it names,
//! and whether they exist.
//!
//! Which spans are claims:
//! - spans in fenced code blocks are examples, not claims, and are skipped;
//! - a span that is obviously not a name is skipped: one with a space, `=`, a quote,
//!   `<`, `>`, `{`, `}`, `,`, `|`, `$`, `:` outside `::`, or `(`/`)` other than a
//!   trailing `()`; one that starts with `-` (a flag), `.` or `..` (relative to the reader),
//!   `/` (outside the repository) or a digit (a number, `100MiB`);
//! - a **path** is a span with a `/` or ending in `.rs`, `.md`, `.toml`, `.sh` or `.py`;
//!   it must name a file or directory of the repository (a trailing `/` asks for a
//!   directory), written whole from the root (`crates/gpuswap-sim/src/engine/`) or
//!   shortened from the left by whole components (`engine/mod.rs`, `victim.rs`), as
//!   prose names files in the context of a directory named before; `*` in a component
//!   matches any run of characters (`apps/*.rs`);
//! - a **type** is a CamelCase span (an upper-case letter, then letters and digits with
//!   at least one lower-case): a struct, enum, union, trait or type alias defined in
//!   `crates/*/src`, an enum variant there, or a name in the caller's list of names from
//!   outside the workspace (`Vec`, `Option`);
//! - a **member** is `Type::item` (a trailing `()` dropped) with `Type` CamelCase: the type
//!   must exist and have an item of that name: a function, constant or associated type of
//!   one of its `impl` blocks, a variant of the enum, a named field of the struct, or an
//!   item of the trait;
//! - every other span (`snake_case`, `module::function`, `SCREAMING_CASE`) is prose.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::{self, Visit};

/// What a code span claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    Path(String),
    Type(String),
    Member { ty: String, item: String },
}

/// The inline code spans of `markdown` outside fenced code blocks, with their lines.
pub fn code_spans(markdown: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            spans.extend(line_spans(line).into_iter().map(|s| (n + 1, s)));
        }
    }
    spans
}

/// The code spans of one line: a run of backticks opens a span that the next run of the
/// same length closes.
fn line_spans(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let open = run_at(i);
        let body = i + open;
        let close = (body..chars.len())
            .find(|&j| chars[j] == '`' && run_at(j) == open && (j == 0 || chars[j - 1] != '`'));
        match close {
            Some(j) => {
                spans.push(chars[body..j].iter().collect::<String>().trim().to_string());
                i = j + open;
            }
            None => i = body,
        }
    }
    spans
}

/// What `span` claims, `None` for prose (see the module's rules).
pub fn classify(span: &str) -> Option<Claim> {
    let span = span.strip_suffix("()").unwrap_or(span);
    let odd = |c: char| c.is_whitespace() || "=\"'<>{}(),|$".contains(c);
    let starts_oddly =
        span.starts_with(['-', '.', '/']) || span.starts_with(|c: char| c.is_ascii_digit());
    if span.is_empty() || span.contains(odd) || starts_oddly || span.replace("::", "").contains(':')
    {
        return None;
    }
    let extensions = [".rs", ".md", ".toml", ".sh", ".py"];
    if span.contains('/') || extensions.iter().any(|e| span.ends_with(e)) {
        return Some(Claim::Path(span.to_string()));
    }
    match span.split("::").collect::<Vec<_>>().as_slice() {
        [ty] if is_camel_case(ty) => Some(Claim::Type(ty.to_string())),
        [ty, item] if is_camel_case(ty) && !item.is_empty() => Some(Claim::Member {
            ty: ty.to_string(),
            item: item.to_string(),
        }),
        _ => None,
    }
}

fn is_camel_case(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_uppercase())
        && word.chars().all(|c| c.is_ascii_alphanumeric())
        && word.chars().any(|c| c.is_ascii_lowercase())
}

/// The names defined in the workspace's sources.
#[derive(Debug, Default)]
pub struct Index {
    /// Structs, enums, unions, traits and type aliases.
    pub types: BTreeSet<String>,
    pub variants: BTreeSet<String>,
    /// Each type's items (see the module's rules), by the type's name.
    pub members: BTreeMap<String, BTreeSet<String>>,
}

impl Index {
    /// Adds the names `file` defines.
    pub fn add(&mut self, file: &syn::File) {
        self.visit_file(file);
    }

    fn member(&mut self, ty: &syn::Ident, item: &syn::Ident) {
        self.members
            .entry(ty.to_string())
            .or_default()
            .insert(item.to_string());
    }
}

impl<'ast> Visit<'ast> for Index {
    fn visit_item_struct(&mut self, item: &'ast syn::ItemStruct) {
        self.types.insert(item.ident.to_string());
        for field in &item.fields {
            if let Some(name) = &field.ident {
                self.member(&item.ident, name);
            }
        }
        visit::visit_item_struct(self, item);
    }

    fn visit_item_enum(&mut self, item: &'ast syn::ItemEnum) {
        self.types.insert(item.ident.to_string());
        for variant in &item.variants {
            self.variants.insert(variant.ident.to_string());
            self.member(&item.ident, &variant.ident);
        }
        visit::visit_item_enum(self, item);
    }

    fn visit_item_union(&mut self, item: &'ast syn::ItemUnion) {
        self.types.insert(item.ident.to_string());
        visit::visit_item_union(self, item);
    }

    fn visit_item_type(&mut self, item: &'ast syn::ItemType) {
        self.types.insert(item.ident.to_string());
        visit::visit_item_type(self, item);
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.types.insert(item.ident.to_string());
        for inner in &item.items {
            let name = match inner {
                syn::TraitItem::Const(c) => &c.ident,
                syn::TraitItem::Fn(f) => &f.sig.ident,
                syn::TraitItem::Type(t) => &t.ident,
                _ => continue,
            };
            self.member(&item.ident, name);
        }
        visit::visit_item_trait(self, item);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if let syn::Type::Path(p) = &*item.self_ty
            && let Some(ty) = p.path.segments.last()
        {
            for inner in &item.items {
                let name = match inner {
                    syn::ImplItem::Const(c) => &c.ident,
                    syn::ImplItem::Fn(f) => &f.sig.ident,
                    syn::ImplItem::Type(t) => &t.ident,
                    _ => continue,
                };
                self.member(&ty.ident, name);
            }
        }
        visit::visit_item_impl(self, item);
    }
}

/// One line per claim of `markdown` (named `doc` in the messages) that does not hold:
/// `path_exists` answers for paths, `index` and `outside_names` for types and members.
pub fn false_claims(
    doc: &str,
    markdown: &str,
    index: &Index,
    outside_names: &[&str],
    path_exists: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let known = |ty: &str| {
        index.types.contains(ty) || index.variants.contains(ty) || outside_names.contains(&ty)
    };
    code_spans(markdown)
        .into_iter()
        .filter_map(|(line, span)| {
            let problem = match classify(&span)? {
                Claim::Path(p) if !path_exists(&p) => "no such file or directory".to_string(),
                Claim::Type(t) if !known(&t) => "no such type or variant in crates/*/src".into(),
                Claim::Member { ty, .. } if !index.types.contains(&ty) => {
                    format!("no type {ty} in crates/*/src")
                }
                Claim::Member { ty, item }
                    if !index.members.get(&ty).is_some_and(|m| m.contains(&item)) =>
                {
                    format!("{ty} has no item {item}")
                }
                _ => return None,
            };
            Some(format!("{doc}:{line}: `{span}`: {problem}"))
        })
        .collect()
}

/// The paths of the files and directories (these with a trailing `/`) under `root`,
/// relative to it, leaving out hidden entries and `target/`.
pub fn paths_under(root: &std::path::Path) -> Vec<String> {
    let mut paths = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = format!("{prefix}{name}");
            if entry.path().is_dir() {
                paths.push(format!("{path}/"));
                dirs.push((entry.path(), format!("{path}/")));
            } else {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
}

/// Whether `pattern` names one of `paths` (see [`paths_under`]): it equals the path's
/// last components, `*` matching within a component; a trailing `/` asks for a directory.
pub fn path_exists(paths: &[String], pattern: &str) -> bool {
    let wanted: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    paths
        .iter()
        .filter(|p| p.ends_with('/') || !pattern.ends_with('/'))
        .any(|p| {
            let have: Vec<&str> = p.trim_end_matches('/').split('/').collect();
            have.len() >= wanted.len()
                && have[have.len() - wanted.len()..]
                    .iter()
                    .zip(&wanted)
                    .all(|(h, w)| wildcard(w, h))
        })
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&k| rest.is_char_boundary(k))
                .any(|k| wildcard(tail, &rest[k..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse;
    use std::path::Path;

    #[test]
    fn spans_are_read_outside_fences() {
        let md = "Use `a` and ``b`c`` here.\n```\n`not_this`\n```\nand `d`, `` ` `` too\n";
        let found: Vec<(usize, String)> = code_spans(md);
        let expected = [(1, "a"), (1, "b`c"), (5, "d"), (5, "`")];
        assert_eq!(found, expected.map(|(l, s)| (l, s.to_string())));
    }

    #[test]
    fn spans_are_classified_by_the_rules() {
        let path = |s: &str| Some(Claim::Path(s.into()));
        assert_eq!(
            classify("crates/gpuswap-sim/src/engine/"),
            path("crates/gpuswap-sim/src/engine/")
        );
        assert_eq!(classify("preset.rs"), path("preset.rs"));
        assert_eq!(classify("Engine"), Some(Claim::Type("Engine".into())));
        let member = Some(Claim::Member {
            ty: "Manager".into(),
            item: "check_invariants".into(),
        });
        assert_eq!(classify("Manager::check_invariants()"), member);
        for prose in [
            "gpuswap top",
            "at_limit = \"wait\"",
            "--json",
            "100MiB",
            "VICTIMS",
            "scenario::parse",
            "handle_timeout(now_ns)",
            "../shared/spec/dymgpu.md",
            "Vec<u8>",
            "https://example.org/x",
            "",
        ] {
            assert_eq!(classify(prose), None, "{prose}");
        }
    }

    fn index() -> Index {
        let source = "pub struct Engine { pub clock_ns: u64 }\n\
                      impl Engine { pub fn step(&mut self) {} }\n\
                      pub enum Msg { Alloc, Free }\n\
                      pub trait Policy { fn pick(&self); }\n\
                      type Alias = u8;\n";
        let mut index = Index::default();
        index.add(&parse(Path::new("x.rs"), source));
        index
    }

    #[test]
    fn false_claims_are_reported_with_their_lines() {
        let md = "# Map\n\
                  `Engine`, `Engine::step`, `Engine::clock_ns`, `Msg::Alloc`, `Free`,\n\
                  `Policy::pick`, `Alias`, `Vec`, `real/path.rs`.\n\
                  `Engine::fly`, `Ghost`, `Ghost::x`, `missing/path.rs`.\n";
        let exists = |p: &str| p == "real/path.rs";
        let found = false_claims("MAP.md", md, &index(), &["Vec"], &exists);
        assert_eq!(
            found,
            [
                "MAP.md:4: `Engine::fly`: Engine has no item fly",
                "MAP.md:4: `Ghost`: no such type or variant in crates/*/src",
                "MAP.md:4: `Ghost::x`: no type Ghost in crates/*/src",
                "MAP.md:4: `missing/path.rs`: no such file or directory",
            ]
        );
    }

    #[test]
    fn paths_match_whole_or_shortened_from_the_left() {
        let paths = paths_under(Path::new(env!("CARGO_MANIFEST_DIR")));
        assert!(paths.contains(&"src/lib.rs".to_string()));
        assert!(paths.contains(&"src/".to_string()));
        for real in [
            "src/lib.rs",
            "lib.rs",
            "src/",
            "src",
            "src/*.rs",
            "s*c/lib.rs",
            "*.toml",
        ] {
            assert!(path_exists(&paths, real), "{real}");
        }
        for missing in ["rc/lib.rs", "lib.rs/", "src/*.py", "missing/", "chunk.rs"] {
            assert!(!path_exists(&paths, missing), "{missing}");
        }
    }
}
