//! No function over 150 lines in `crates/*/src` outside tests and data literals.
//!
//! Counted from the line of `fn` to the line of the closing brace, for free functions,
//! impl functions and trait default functions, nested ones included. Test code is left
//! out: `#[cfg(test)]` items, `tests.rs` and `*_tests.rs` files (reached only through
//! `#[cfg(test)]` modules), and the `tests/` and `benches/` directories, which are not
//! under `src/`.

use gpuswap_house::fn_length::{Exemption, functions, limit_problems};
use gpuswap_house::source::{read_disk, walk};
use gpuswap_house::workspace::{crate_names, crate_roots, relative};

/// The most lines a function may have.
const LIMIT_LINES: usize = 150;

/// Data literals, exempt by rule.
const EXEMPTIONS: &[Exemption] = &[Exemption {
    dir: "crates/gpuswap-sim/src/apps/",
    name: "program",
    why: "an app's kernel table: one literal of its phases and kernels, read top to bottom \
          against the paper's description of the app",
}];

#[test]
fn no_function_is_over_150_lines() {
    let mut fns = Vec::new();
    for krate in crate_names() {
        for root in crate_roots(&krate) {
            let tree = walk(&root, &read_disk, &|file, ast| functions(file, ast));
            fns.extend(tree.modules.into_iter().flat_map(|m| m.facts));
        }
    }
    let problems = limit_problems(&fns, LIMIT_LINES, EXEMPTIONS, &relative);
    assert!(
        problems.is_empty(),
        "function length:\n{}",
        problems.join("\n")
    );
}
