//! ARCHITECTURE.md is a map a newcomer reads in ten minutes, and every name on it is real.
//!
//! Every `code span` in it (outside fenced blocks) that names a path or a type is
//! checked, by the rules of `gpuswap_house::architecture`:
//! - a path (a span with `/`, or ending in `.rs`, `.md`, `.toml`, `.sh`, `.py`) must name
//!   a file or directory of the repository (a trailing `/` asks for a directory), whole
//!   from the root or shortened from the left by whole components (`engine/mod.rs`,
//!   `victim.rs`) where the text around names the directory; `*` matches within one
//!   component (`apps/*.rs`);
//! - a CamelCase span must be a struct, enum, union, trait, type alias or enum variant
//!   defined in `crates/*/src`, or one of `OUTSIDE_NAMES` below;
//! - `Type::item` must name a type defined there with an item of that name (an impl's
//!   function, constant or associated type, a variant, a named field, a trait's item);
//! - anything else (`snake_case`, `module::function`, commands, flags, numbers with
//!   units, spans with spaces, `=` or quotes) is prose and not checked.

use gpuswap_house::architecture::{Index, false_claims, path_exists, paths_under};
use gpuswap_house::source::{parse, read_disk};
use gpuswap_house::workspace::{crate_dir, crate_names, repo_root, rust_files};

/// The most lines the map may have.
const MAX_LINES: usize = 300;

/// Names from outside the workspace the map may use: the standard library's and its
/// dependencies' types and traits.
#[rustfmt::skip]
const OUTSIDE_NAMES: &[&str] = &[
    "Option", "Some", "None", "Result", "Ok", "Err",
    "Vec", "VecDeque", "String", "Box", "Rc", "Arc", "Cell", "RefCell", "Mutex", "RwLock",
    "HashMap", "HashSet", "BTreeMap", "BTreeSet", "BinaryHeap",
    "Copy", "Clone", "Debug", "Default", "Eq", "Ord", "PartialEq", "PartialOrd", "Hash",
    "Send", "Sync", "Iterator", "Serialize", "Deserialize",
];

#[test]
fn architecture_md_is_a_short_map_whose_names_exist() {
    let root = repo_root();
    let doc = root.join("ARCHITECTURE.md");
    let markdown = read_disk(&doc).expect("ARCHITECTURE.md at the repository root");

    let mut index = Index::default();
    for krate in crate_names() {
        for file in rust_files(&crate_dir(&krate).join("src")) {
            let text = read_disk(&file).expect("a source file is readable");
            index.add(&parse(&file, &text));
        }
    }
    let paths = paths_under(&root);
    let exists = |path: &str| path_exists(&paths, path);

    let mut problems = false_claims("ARCHITECTURE.md", &markdown, &index, OUTSIDE_NAMES, &exists);
    let lines = markdown.lines().count();
    if lines > MAX_LINES {
        problems.push(format!(
            "ARCHITECTURE.md is {lines} lines, over {MAX_LINES}: it is the map, the details \
             go to docs/"
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problems in ARCHITECTURE.md:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
