//! Reading the workspace's Rust sources: parsing a file, dropping its test-only code, and
//! walking a crate's module tree from its root file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit_mut::{self, VisitMut};
use syn::{Attribute, Fields, Item, Meta, Stmt};

/// How the checkers read a file: from disk for the workspace, from a map in their own
/// unit tests. `None` when there is no such file.
pub type Reader<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// Reads a file from disk.
pub fn read_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Parses `text` (the contents of `path`) as a Rust file.
///
/// # Panics
/// When the file is not valid Rust: the house tests cannot judge what does not compile.
pub fn parse(path: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| {
        let at = e.span().start();
        panic!("{}:{}:{}: {e}", path.display(), at.line, at.column + 1)
    })
}

/// Parses `text` and removes its test-only code (see [`is_test_only`]), for the
/// checkers' own tests.
#[cfg(test)]
pub(crate) fn parse_without_tests(path: &Path, text: &str) -> syn::File {
    let mut file = parse(path, text);
    StripTests.visit_file_mut(&mut file);
    file
}

/// Whether the attributes make their item exist only in tests: `#[cfg(test)]`,
/// `#[cfg(all(test, …))]` or `#[test]`.
pub fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("test") {
            return true;
        }
        if !attr.path().is_ident("cfg") {
            return false;
        }
        match attr.parse_args::<Meta>() {
            Ok(Meta::Path(p)) => p.is_ident("test"),
            Ok(Meta::List(list)) if list.path.is_ident("all") => list
                .parse_args_with(
                    syn::punctuated::Punctuated::<Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|metas| metas.iter().any(|m| m.path().is_ident("test"))),
            _ => false,
        }
    })
}

/// Whether a file name says the file holds tests (`tests.rs`, `*_tests.rs`).
pub fn is_test_file_name(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// The attributes of an item, whatever its kind.
pub fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Removes test-only items, impl and trait items, fields, variants, statements and match
/// arms, so that every checker sees the code a release build compiles and nothing else.
struct StripTests;

impl VisitMut for StripTests {
    fn visit_file_mut(&mut self, file: &mut syn::File) {
        file.items.retain(|item| !is_test_only(item_attrs(item)));
        visit_mut::visit_file_mut(self, file);
    }

    fn visit_item_mod_mut(&mut self, module: &mut syn::ItemMod) {
        if let Some((_, items)) = &mut module.content {
            items.retain(|item| !is_test_only(item_attrs(item)));
        }
        visit_mut::visit_item_mod_mut(self, module);
    }

    fn visit_item_impl_mut(&mut self, block: &mut syn::ItemImpl) {
        block.items.retain(|item| {
            let attrs = match item {
                syn::ImplItem::Const(i) => &i.attrs,
                syn::ImplItem::Fn(i) => &i.attrs,
                syn::ImplItem::Type(i) => &i.attrs,
                syn::ImplItem::Macro(i) => &i.attrs,
                _ => return true,
            };
            !is_test_only(attrs)
        });
        visit_mut::visit_item_impl_mut(self, block);
    }

    fn visit_item_trait_mut(&mut self, trait_: &mut syn::ItemTrait) {
        trait_.items.retain(|item| {
            let attrs = match item {
                syn::TraitItem::Const(i) => &i.attrs,
                syn::TraitItem::Fn(i) => &i.attrs,
                syn::TraitItem::Type(i) => &i.attrs,
                syn::TraitItem::Macro(i) => &i.attrs,
                _ => return true,
            };
            !is_test_only(attrs)
        });
        visit_mut::visit_item_trait_mut(self, trait_);
    }

    fn visit_fields_mut(&mut self, fields: &mut Fields) {
        let kept = |fields: &mut syn::punctuated::Punctuated<syn::Field, syn::Token![,]>| {
            *fields = std::mem::take(fields)
                .into_iter()
                .filter(|f| !is_test_only(&f.attrs))
                .collect();
        };
        match fields {
            Fields::Named(named) => kept(&mut named.named),
            Fields::Unnamed(unnamed) => kept(&mut unnamed.unnamed),
            Fields::Unit => {}
        }
        visit_mut::visit_fields_mut(self, fields);
    }

    fn visit_item_enum_mut(&mut self, item: &mut syn::ItemEnum) {
        item.variants = std::mem::take(&mut item.variants)
            .into_iter()
            .filter(|v| !is_test_only(&v.attrs))
            .collect();
        visit_mut::visit_item_enum_mut(self, item);
    }

    fn visit_block_mut(&mut self, block: &mut syn::Block) {
        block.stmts.retain(|stmt| {
            let attrs: &[Attribute] = match stmt {
                Stmt::Local(local) => &local.attrs,
                Stmt::Item(item) => item_attrs(item),
                Stmt::Macro(mac) => &mac.attrs,
                Stmt::Expr(..) => &[],
            };
            !is_test_only(attrs)
        });
        visit_mut::visit_block_mut(self, block);
    }

    fn visit_expr_match_mut(&mut self, expr: &mut syn::ExprMatch) {
        expr.arms.retain(|arm| !is_test_only(&arm.attrs));
        visit_mut::visit_expr_match_mut(self, expr);
    }
}

/// One module file of a crate with what a checker took from it.
pub struct Module<T> {
    /// Its module path from the crate root (empty for the root).
    pub path: Vec<String>,
    pub file: PathBuf,
    /// Its `mod x;` declarations.
    pub decls: Vec<ModDecl>,
    /// What the checker's `extract` made of its non-test code.
    pub facts: T,
}

/// A `mod name;` declaration in a module file.
#[derive(Debug, PartialEq)]
pub struct ModDecl {
    pub name: String,
    pub line: usize,
    /// The inline (`mod x { … }`) modules it is declared in.
    pub inline: Vec<String>,
}

/// The module files reachable from one crate root through non-test `mod x;`
/// declarations, and the files its test-only modules would read.
pub struct Tree<T> {
    /// The root module first, then breadth-first.
    pub modules: Vec<Module<T>>,
    /// Files named by `#[cfg(test)] mod x;` declarations, whether they exist or not.
    pub test_files: BTreeSet<PathBuf>,
}

/// Walks the module tree rooted at `root_file` (`src/lib.rs`, `src/main.rs`), handing
/// each file's non-test code to `extract`. The syntax trees stay on the thread that
/// parsed them (their spans find their lines there); what `extract` returns can travel.
///
/// # Panics
/// When a file cannot be read or parsed, when a `mod x;` has no single file, or when a
/// non-test module has a `#[path]` attribute (none does; supporting it is not worth it).
pub fn walk<T>(
    root_file: &Path,
    read: Reader,
    extract: &dyn Fn(&Path, &syn::File) -> T,
) -> Tree<T> {
    let mut tree = Tree {
        modules: Vec::new(),
        test_files: BTreeSet::new(),
    };
    let mut queue =
        std::collections::VecDeque::from([(Vec::<String>::new(), root_file.to_path_buf())]);
    while let Some((path, file)) = queue.pop_front() {
        let text = read(&file).unwrap_or_else(|| panic!("cannot read {}", file.display()));
        let mut ast = parse(&file, &text);
        let dir = module_dir(&file, path.is_empty());
        let mut decls = Vec::new();
        declarations(
            &ast.items,
            &[],
            &file,
            &dir,
            &mut decls,
            &mut tree.test_files,
        );
        for decl in &decls {
            let base = decl.inline.iter().fold(dir.clone(), |d, m| d.join(m));
            let flat = base.join(format!("{}.rs", decl.name));
            let nested = base.join(&decl.name).join("mod.rs");
            let child_file = match (read(&flat).is_some(), read(&nested).is_some()) {
                (true, false) => flat,
                (false, true) => nested,
                _ => panic!(
                    "{}:{}: mod {} has no single file",
                    file.display(),
                    decl.line,
                    decl.name
                ),
            };
            let mut child = path.clone();
            child.extend(decl.inline.iter().cloned());
            child.push(decl.name.clone());
            queue.push_back((child, child_file));
        }
        StripTests.visit_file_mut(&mut ast);
        let facts = extract(&file, &ast);
        tree.modules.push(Module {
            path,
            file,
            decls,
            facts,
        });
    }
    tree
}

/// The directory a module file's `mod x;` children live in: its own directory for the
/// crate root and `mod.rs`, `a/` for `a.rs`.
fn module_dir(file: &Path, is_root: bool) -> PathBuf {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if is_root || name == "mod.rs" {
        file.parent().expect("a file has a directory").to_path_buf()
    } else {
        file.with_extension("")
    }
}

/// Collects the `mod x;` declarations in `items` (inline modules included) and the
/// files of test-only module declarations.
fn declarations(
    items: &[Item],
    inline: &[String],
    file: &Path,
    dir: &Path,
    decls: &mut Vec<ModDecl>,
    test_files: &mut BTreeSet<PathBuf>,
) {
    for item in items {
        let Item::Mod(module) = item else { continue };
        let name = module.ident.to_string();
        let path_attr = path_attribute(&module.attrs);
        if is_test_only(&module.attrs) {
            let base = inline.iter().fold(dir.to_path_buf(), |d, m| d.join(m));
            match path_attr {
                Some(p) => test_files.insert(file.parent().expect("a directory").join(p)),
                None => {
                    test_files.insert(base.join(format!("{name}.rs")));
                    test_files.insert(base.join(&name).join("mod.rs"))
                }
            };
            continue;
        }
        match &module.content {
            Some((_, inner)) => {
                let mut deeper = inline.to_vec();
                deeper.push(name);
                declarations(inner, &deeper, file, dir, decls, test_files);
            }
            None => {
                let line = module.mod_token.span.start().line;
                assert!(
                    path_attr.is_none(),
                    "{}:{line}: #[path] on a non-test module is not supported",
                    file.display()
                );
                decls.push(ModDecl {
                    name,
                    line,
                    inline: inline.to_vec(),
                });
            }
        }
    }
}

/// The value of a `#[path = "…"]` attribute.
fn path_attribute(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A reader over files held in memory.
    pub(crate) fn memory(files: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        move |p: &Path| map.get(p).cloned()
    }

    #[test]
    fn test_only_attributes_are_recognised() {
        let attrs = |src: &str| syn::parse_str::<syn::ItemFn>(src).unwrap().attrs;
        assert!(is_test_only(&attrs("#[cfg(test)] fn f() {}")));
        assert!(is_test_only(&attrs("#[cfg(all(test, unix))] fn f() {}")));
        assert!(is_test_only(&attrs("#[test] fn f() {}")));
        assert!(!is_test_only(&attrs("#[cfg(any(test, unix))] fn f() {}")));
        assert!(!is_test_only(&attrs("#[cfg(unix)] #[inline] fn f() {}")));
    }

    #[test]
    fn stripping_removes_every_kind_of_test_item() {
        let source = "#[cfg(test)] mod tests { fn t() {} }\n\
                      struct S { #[cfg(test)] a: u8, b: u8 }\n\
                      enum E { #[cfg(test)] A, B }\n\
                      impl S { #[cfg(test)] fn only() {} fn kept() {} }\n\
                      fn f() { #[cfg(test)] let x = 1; match 1 { #[cfg(test)] 0 => {}, _ => {} } }\n";
        let file = parse_without_tests(Path::new("x.rs"), source);
        let text = quote_free(&file);
        assert!(!text.contains("tests"), "{text}");
        assert!(!text.contains(" a "), "{text}");
        assert!(!text.contains("only"), "{text}");
        assert!(!text.contains("let x"), "{text}");
        assert!(!text.contains("0 =>"), "{text}");
        assert!(text.contains("kept") && text.contains("B"), "{text}");
    }

    /// The file printed back as tokens, to look for what stayed.
    fn quote_free(file: &syn::File) -> String {
        quote::ToTokens::to_token_stream(file).to_string()
    }

    #[test]
    fn walk_follows_mod_declarations_and_records_test_files() {
        let read = memory(&[
            (
                "/c/src/lib.rs",
                "mod a;\nmod inline { mod b; }\n#[cfg(test)]\nmod tests;\n",
            ),
            ("/c/src/a.rs", "mod deep;\n"),
            ("/c/src/a/deep.rs", ""),
            ("/c/src/inline/b/mod.rs", ""),
        ]);
        let tree = walk(Path::new("/c/src/lib.rs"), &read, &|_, _| ());
        let paths: Vec<String> = tree.modules.iter().map(|m| m.path.join("::")).collect();
        assert_eq!(paths, ["", "a", "inline::b", "a::deep"]);
        assert!(tree.test_files.contains(Path::new("/c/src/tests.rs")));
        assert_eq!(tree.modules[0].decls[1].inline, ["inline"]);
    }

    #[test]
    #[should_panic(expected = "mod gone has no single file")]
    fn walk_fails_on_a_missing_module_file() {
        let read = memory(&[("/c/src/lib.rs", "mod gone;\n")]);
        walk(Path::new("/c/src/lib.rs"), &read, &|_, _| ());
    }
}
