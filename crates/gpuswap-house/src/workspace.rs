//! Where the workspace's crates and files are.

use std::path::{Path, PathBuf};

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gpuswap-house sits two levels below the root")
        .to_path_buf()
}

/// `path` relative to the repository root, for messages; paths elsewhere stay whole.
pub fn relative(path: &Path) -> String {
    let root = repo_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The directories under `crates/` with a `Cargo.toml`, by name, sorted.
pub fn crate_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("crates"))
        .expect("crates/ is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .filter_map(|p| p.file_name()?.to_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// The directory of crate `name` (`gpuswap-core`).
pub fn crate_dir(name: &str) -> PathBuf {
    repo_root().join("crates").join(name)
}

/// The module tree roots of a crate: `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`
/// where they exist.
pub fn crate_roots(name: &str) -> Vec<PathBuf> {
    let src = crate_dir(name).join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    let bin = src.join("bin");
    if bin.is_dir() {
        roots.extend(rust_files(&bin));
    }
    roots
}

/// Every `.rs` file under `dir`, sorted; none when `dir` does not exist.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    let mut out = Vec::new();
    for path in entries {
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}
