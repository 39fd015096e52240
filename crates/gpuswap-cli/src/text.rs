//! Reading input files as text, with errors that say where a file stops being UTF-8,
//! and writing output files so that no reader sees one half written.

use std::path::{Path, PathBuf};

/// Reads `path` as UTF-8 text. The error leaves out the path (callers name it): "cannot
/// read: ..." for I/O, or the line and column of the first byte that is not UTF-8.
pub fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    String::from_utf8(bytes).map_err(|e| not_utf8(e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// The name a file is written under until it is whole: `results.csv.partial`, in the
/// same folder (a rename does not cross file systems).
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// Writes `text` to `path` through [`partial_path`], renamed when written.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let partial = partial_path(path);
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)
}

/// Longest line of a file a TOML error quotes whole.
const MAX_QUOTED_CHARS: usize = 160;

/// A TOML parser's error for a reader: its lines, with a line of the file longer than
/// [`MAX_QUOTED_CHARS`] cut (a 20,000-character line once made a 40 kB message; the
/// error's first line still gives its line and column).
pub fn toml_error(error: &toml::de::Error) -> String {
    let text = error.to_string();
    let lines: Vec<String> = text
        .trim_end()
        .lines()
        .map(|line| {
            let chars = line.chars().count();
            if chars <= MAX_QUOTED_CHARS {
                line.to_owned()
            } else {
                let cut: String = line.chars().take(MAX_QUOTED_CHARS).collect();
                format!("{cut}... ({chars} characters)")
            }
        })
        .collect();
    lines.join("\n")
}

/// The message for bytes that are valid UTF-8 up to `valid_up_to`.
fn not_utf8(bytes: &[u8], valid_up_to: usize) -> String {
    let good = &bytes[..valid_up_to];
    let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = std::str::from_utf8(&good[line_start..]).map_or(1, |s| s.chars().count() + 1);
    format!(
        "not UTF-8 text: byte 0x{:02x} at line {line}, column {column}; save the file as UTF-8",
        bytes[valid_up_to]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_byte_is_placed_by_line_and_column() {
        let dir = std::env::temp_dir().join(format!("gpuswap-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.toml");
        std::fs::write(&file, b"seed = 1\nname = \"\xc3\xa9t\xff\"\n").unwrap();
        let e = read_text(&file).unwrap_err();
        // Line 2: `name = "` (8 characters), the e-acute and `t` make 10; 0xff is the 11th.
        assert_eq!(
            e,
            "not UTF-8 text: byte 0xff at line 2, column 11; save the file as UTF-8"
        );
        std::fs::write(&file, "seed = 1\n").unwrap();
        assert_eq!(read_text(&file).unwrap(), "seed = 1\n");
        let missing = read_text(&dir.join("missing.toml")).unwrap_err();
        assert!(missing.starts_with("cannot read: "), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
