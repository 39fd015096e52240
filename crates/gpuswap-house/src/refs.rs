//! The paths a source file names: every `use` (groups expanded), every path in its code,
//! and every `a::b` path written inside a macro call, whose tokens syn leaves unparsed.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// What wrote a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A `mod x;` declaration (made by the module walk, not found here).
    Mod,
    /// A `use` item.
    Use,
    /// A path in code, or one written inside a macro call.
    Path,
}

/// One path a file names.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub segments: Vec<String>,
    /// The name it is visible under: the last segment, a `use … as` alias, `*` for a glob.
    pub name: String,
    pub line: usize,
    /// The inline (`mod x { … }`) modules it is written in.
    pub inline: Vec<String>,
    pub via: Via,
    /// Part of a `pub use` (`pub(crate) use` and the like included).
    pub reexport: bool,
}

/// Every path `file` names, in source order within each kind. Test-only code should
/// have been removed first (as [`crate::source::walk`] does).
pub fn references(file: &syn::File) -> Vec<Reference> {
    let mut collector = Collector::default();
    collector.visit_file(file);
    collector.out
}

#[derive(Default)]
struct Collector {
    inline: Vec<String>,
    out: Vec<Reference>,
}

impl Collector {
    fn push(&mut self, segments: Vec<String>, name: String, line: usize, via: Via, reexport: bool) {
        self.out.push(Reference {
            segments,
            name,
            line,
            inline: self.inline.clone(),
            via,
            reexport,
        });
    }

    /// Expands one use tree under `prefix`.
    fn use_tree(&mut self, tree: &syn::UseTree, mut prefix: Vec<String>, reexport: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix, reexport);
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident, None, reexport),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident, Some(&r.rename), reexport),
            syn::UseTree::Glob(g) => {
                let line = g.star_token.span.start().line;
                self.push(prefix, "*".into(), line, Via::Use, reexport);
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(tree, prefix.clone(), reexport);
                }
            }
        }
    }

    /// A use path's last segment; `a::b::{self}` is `a::b`.
    fn use_leaf(
        &mut self,
        mut path: Vec<String>,
        ident: &syn::Ident,
        alias: Option<&syn::Ident>,
        reexport: bool,
    ) {
        let line = ident.span().start().line;
        let mut name = alias.unwrap_or(ident).to_string();
        if ident == "self" {
            if alias.is_none() {
                name = path.last().cloned().unwrap_or_default();
            }
        } else {
            path.push(ident.to_string());
        }
        self.push(path, name, line, Via::Use, reexport);
    }

    /// Finds the `a::b::c` paths among a macro call's tokens; `$crate::…` is left out.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(first) if path_sep_at(&tokens, i + 1) => {
                    let after_dollar = i > 0
                        && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    let after_sep = i > 1 && path_sep_at(&tokens, i - 2);
                    let mut segments = vec![first.to_string()];
                    let mut j = i + 1;
                    while path_sep_at(&tokens, j)
                        && let Some(TokenTree::Ident(next)) = tokens.get(j + 2)
                    {
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if !after_dollar && !after_sep && segments.len() > 1 {
                        let name = segments.last().cloned().unwrap_or_default();
                        self.push(segments, name, first.span().start().line, Via::Path, false);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Whether `tokens[i..]` starts with `::`.
fn path_sep_at(tokens: &[TokenTree], i: usize) -> bool {
    matches!(
        (tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        self.inline.push(module.ident.to_string());
        visit::visit_item_mod(self, module);
        self.inline.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let reexport = !matches!(item.vis, syn::Visibility::Inherited);
        self.use_tree(&item.tree, Vec::new(), reexport);
    }

    fn visit_item_extern_crate(&mut self, item: &'ast syn::ItemExternCrate) {
        let line = item.ident.span().start().line;
        let name = item.rename.as_ref().map_or(&item.ident, |(_, r)| r);
        self.push(
            vec![item.ident.to_string()],
            name.to_string(),
            line,
            Via::Use,
            false,
        );
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if let Some(first) = path.segments.first() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let name = segments.last().cloned().unwrap_or_default();
            self.push(
                segments,
                name,
                first.ident.span().start().line,
                Via::Path,
                false,
            );
        }
        visit::visit_path(self, path);
    }

    /// `pub(crate)` and `pub(super)` say who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        self.macro_tokens(mac.tokens.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse_without_tests;
    use std::path::Path;

    /// The `crate`/`super` references of `source`, as `path@line`.
    fn local(source: &str) -> Vec<String> {
        references(&parse_without_tests(Path::new("x.rs"), source))
            .iter()
            .filter(|r| matches!(r.segments[0].as_str(), "crate" | "super" | "self"))
            .map(|r| format!("{}@{}", r.segments.join("::"), r.line))
            .collect()
    }

    #[test]
    fn grouped_uses_are_expanded() {
        let source = "use crate::{a::X, b::{self, c::Y as Z}, d::*};\nuse super::Foo;\n";
        assert_eq!(
            local(source),
            [
                "crate::a::X@1",
                "crate::b@1",
                "crate::b::c::Y@1",
                "crate::d@1",
                "super::Foo@2"
            ]
        );
        let file = parse_without_tests(Path::new("x.rs"), source);
        let names: Vec<String> = references(&file).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["X", "b", "Z", "*", "Foo"]);
    }

    #[test]
    fn inline_paths_are_found_but_not_in_comments_or_strings() {
        let source = "// crate::commented::X\n\
                      fn f() -> u64 {\n    \
                      let s = \"crate::in_string {\";\n    \
                      super::super::g() + crate::policy::gpuswap::victim::VICTIMS\n\
                      }\n\
                      macro_rules! m { () => { $crate::ignored } }\n\
                      fn h() { println!(\"{}\", crate::in_macro::Y); }\n";
        assert_eq!(
            local(source),
            [
                "super::super::g@4",
                "crate::policy::gpuswap::victim::VICTIMS@4",
                "crate::in_macro::Y@7"
            ]
        );
    }

    #[test]
    fn test_only_code_names_nothing() {
        let source = "#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::x::Y;\n}\n\
                      #[cfg(test)]\nuse crate::only_in_tests::{A, B};\n\
                      pub(crate) struct S {\n    #[cfg(test)]\n    f: crate::t::T,\n    g: crate::kept::K,\n}\n\
                      pub(super) fn f() {}\n";
        assert_eq!(local(source), ["crate::kept::K@11"]);
    }

    #[test]
    fn inline_modules_and_reexports_are_recorded() {
        let source = "mod common {\n    pub const X: u64 = super::MIB;\n}\n\
                      pub use inner::Item;\n";
        let refs = references(&parse_without_tests(Path::new("x.rs"), source));
        let mib = refs.iter().find(|r| r.name == "MIB").unwrap();
        assert_eq!(mib.inline, ["common"]);
        let item = refs.iter().find(|r| r.name == "Item").unwrap();
        assert!(item.reexport);
        assert_eq!(item.segments, ["inner", "Item"]);
    }
}
