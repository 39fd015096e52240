//! How long each function is: free functions, impl functions and trait default
//! functions, nested ones included, each counted from the line of its `fn` keyword to the
//! line of its closing brace.

use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};

/// One function with its length.
#[derive(Clone, Debug, PartialEq)]
pub struct FnLength {
    pub name: String,
    pub file: PathBuf,
    /// The line of its `fn` keyword (where rustfmt also puts `pub`, `const`, `async`).
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in `ast`, the contents of `file` (test-only code should
/// have been removed first).
pub fn functions(file: &Path, ast: &syn::File) -> Vec<FnLength> {
    let mut counter = Counter {
        file,
        out: Vec::new(),
    };
    counter.visit_file(ast);
    counter.out
}

struct Counter<'a> {
    file: &'a Path,
    out: Vec<FnLength>,
}

impl Counter<'_> {
    fn record(&mut self, sig: &syn::Signature, body: &syn::Block) {
        let line = sig.fn_token.span.start().line;
        let end = body.brace_token.span.close().end().line;
        self.out.push(FnLength {
            name: sig.ident.to_string(),
            file: self.file.to_path_buf(),
            line,
            lines: end + 1 - line,
        });
    }
}

impl<'ast> Visit<'ast> for Counter<'_> {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.record(&item.sig, &item.block);
        visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.record(&item.sig, &item.block);
        visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(body) = &item.default {
            self.record(&item.sig, body);
        }
        visit::visit_trait_item_fn(self, item);
    }
}

/// Functions exempt from the limit by rule: those named `name` in the files directly in
/// `dir` (a path from the repository root, ending in `/`).
pub struct Exemption {
    pub dir: &'static str,
    pub name: &'static str,
    pub why: &'static str,
}

impl Exemption {
    fn covers(&self, f: &FnLength, file: &str) -> bool {
        f.name == self.name
            && file
                .strip_prefix(self.dir)
                .is_some_and(|rest| !rest.contains('/'))
    }
}

/// One line per problem with the limit of `limit` lines over `fns`, whose files
/// `relative` turns into repository paths: a function over the limit that no exemption
/// covers, and an exemption that covers no function.
pub fn limit_problems(
    fns: &[FnLength],
    limit: usize,
    exemptions: &[Exemption],
    relative: &dyn Fn(&Path) -> String,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used_exemptions = vec![false; exemptions.len()];
    for f in fns {
        let file = relative(&f.file);
        if let Some(k) = exemptions.iter().position(|e| e.covers(f, &file)) {
            used_exemptions[k] = true;
            continue;
        }
        if f.lines <= limit {
            continue;
        }
        problems.push(format!(
            "fn {} ({file}:{}) is {} lines, over {limit}: split it by what it does",
            f.name, f.line, f.lines
        ));
    }
    for (e, used) in exemptions.iter().zip(used_exemptions) {
        if !used {
            problems.push(format!(
                "the exemption of fn {} in {} covers nothing",
                e.name, e.dir
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse_without_tests;

    /// A function `name` of `body_lines` statement lines: `body_lines + 2` lines long.
    fn function(name: &str, body_lines: usize) -> String {
        let body: String = (0..body_lines)
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect();
        format!("fn {name}() {{\n{body}}}\n")
    }

    #[test]
    fn every_kind_of_function_is_measured() {
        let rest = "impl S {
    pub fn method(&self) {
        fn inner() {
            let _x = 0;
        }
    }
}
trait T {
    fn required(&self);
    fn default(&self) {}
}
";
        let source = format!(
            "{}{rest}#[cfg(test)]\nmod tests {{\n{}}}\n",
            function("long", 160),
            function("in_tests", 200),
        );
        let path = Path::new("x.rs");
        let found: Vec<(String, usize, usize)> =
            functions(path, &parse_without_tests(path, &source))
                .into_iter()
                .map(|f| (f.name, f.line, f.lines))
                .collect();
        let expected = [
            ("long", 1, 162),
            ("method", 164, 5),
            ("inner", 165, 3),
            ("default", 172, 1),
        ];
        assert_eq!(found, expected.map(|(n, l, c)| (n.to_string(), l, c)));
    }

    fn fn_of(name: &str, file: &str, lines: usize) -> FnLength {
        FnLength {
            name: name.into(),
            file: file.into(),
            line: 7,
            lines,
        }
    }

    #[test]
    fn the_limit_sees_long_and_exempt_functions_and_stale_exemptions() {
        let fns = [
            fn_of("long", "src/a.rs", 151),
            fn_of("fine", "src/a.rs", 150),
            fn_of("short", "src/b.rs", 90),
            fn_of("program", "src/apps/x.rs", 300),
            fn_of("program", "src/apps/deeper/y.rs", 300),
        ];
        let exemptions = [
            Exemption {
                dir: "src/apps/",
                name: "program",
                why: "kernel tables",
            },
            Exemption {
                dir: "src/gone/",
                name: "table",
                why: "stale",
            },
        ];
        let shown = |p: &Path| p.display().to_string();
        let problems = limit_problems(&fns, 150, &exemptions, &shown);
        assert_eq!(
            problems,
            [
                "fn long (src/a.rs:7) is 151 lines, over 150: split it by what it does",
                "fn program (src/apps/deeper/y.rs:7) is 300 lines, over 150: split it by what it does",
                "the exemption of fn table in src/gone/ covers nothing",
            ]
        );
    }
}
