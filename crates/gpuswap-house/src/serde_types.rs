//! The types a file makes serde-serializable: `#[derive(Serialize)]` or `Deserialize`
//! (under `cfg_attr` too) and hand-written `impl Serialize for T` / `Deserialize`.

use proc_macro2::{TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};

/// One serde type: its name, the line that makes it one, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct SerdeType {
    pub name: String,
    pub line: usize,
    /// `derive(Serialize)`, `impl Deserialize` and the like.
    pub how: String,
}

/// The serde types of `file` (test-only code should have been removed first).
pub fn serde_types(file: &syn::File) -> Vec<SerdeType> {
    let mut finder = Finder::default();
    finder.visit_file(file);
    finder.out
}

const TRAITS: &[&str] = &["Serialize", "Deserialize"];

#[derive(Default)]
struct Finder {
    out: Vec<SerdeType>,
}

impl Finder {
    fn derived(&mut self, ident: &syn::Ident, attrs: &[syn::Attribute]) {
        let mut traits = Vec::new();
        for attr in attrs {
            if let syn::Meta::List(list) = &attr.meta
                && (list.path.is_ident("derive") || list.path.is_ident("cfg_attr"))
            {
                let is_derive = list.path.is_ident("derive");
                derive_lists(list.tokens.clone(), is_derive, &mut traits);
            }
        }
        for name in traits.into_iter().filter(|t| TRAITS.contains(&t.as_str())) {
            self.out.push(SerdeType {
                name: ident.to_string(),
                line: ident.span().start().line,
                how: format!("derive({name})"),
            });
        }
    }
}

/// Adds the last segment of every path in the derive lists among `tokens`: all of them
/// when `tokens` is itself a derive list, else those of `derive(…)` groups inside
/// (`cfg_attr(feature = "x", derive(Serialize))`).
fn derive_lists(tokens: TokenStream, is_derive: bool, out: &mut Vec<String>) {
    if is_derive {
        let parser = Punctuated::<syn::Path, syn::Token![,]>::parse_terminated;
        if let Ok(paths) = syn::parse::Parser::parse2(parser, tokens) {
            out.extend(
                paths
                    .iter()
                    .filter_map(|p| Some(p.segments.last()?.ident.to_string())),
            );
        }
        return;
    }
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        if let TokenTree::Group(group) = token {
            let after_derive = matches!(i.checked_sub(1).map(|k| &tokens[k]),
                Some(TokenTree::Ident(id)) if id == "derive");
            derive_lists(group.stream(), after_derive, out);
        }
    }
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_struct(&mut self, item: &'ast syn::ItemStruct) {
        self.derived(&item.ident, &item.attrs);
        visit::visit_item_struct(self, item);
    }

    fn visit_item_enum(&mut self, item: &'ast syn::ItemEnum) {
        self.derived(&item.ident, &item.attrs);
        visit::visit_item_enum(self, item);
    }

    fn visit_item_union(&mut self, item: &'ast syn::ItemUnion) {
        self.derived(&item.ident, &item.attrs);
        visit::visit_item_union(self, item);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let trait_name = item
            .trait_
            .as_ref()
            .and_then(|(_, path, _)| path.segments.last())
            .map(|s| s.ident.to_string());
        let self_name = match &*item.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.clone()),
            _ => None,
        };
        if let (Some(t), Some(ident)) = (trait_name, self_name)
            && TRAITS.contains(&t.as_str())
        {
            self.out.push(SerdeType {
                name: ident.to_string(),
                line: item.impl_token.span.start().line,
                how: format!("impl {t}"),
            });
        }
        visit::visit_item_impl(self, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse_without_tests;
    use std::path::Path;

    #[test]
    fn derives_impls_and_cfg_attr_are_found() {
        let source = "#[derive(Debug, serde::Serialize)]\nstruct A;\n\
                      #[cfg_attr(feature = \"x\", derive(Deserialize))]\nenum B { X }\n\
                      struct C;\nimpl<'de> serde::Deserialize<'de> for C {}\n\
                      #[derive(Clone)]\nstruct Plain;\n\
                      #[cfg(test)]\n#[derive(Serialize)]\nstruct OnlyInTests;\n";
        let found: Vec<(String, usize, String)> =
            serde_types(&parse_without_tests(Path::new("x.rs"), source))
                .into_iter()
                .map(|t| (t.name, t.line, t.how))
                .collect();
        let expected = [
            ("A", 2, "derive(Serialize)"),
            ("B", 4, "derive(Deserialize)"),
            ("C", 6, "impl Deserialize"),
        ];
        assert_eq!(
            found,
            expected.map(|(n, l, h)| (n.to_string(), l, h.to_string()))
        );
    }
}
