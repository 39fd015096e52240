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

/// Writes `bytes` to `path` through [`partial_path`], renamed when written: a reader
/// sees the whole file or none, and a failed write (a full disk) leaves neither a
/// truncated file nor the partial one.
pub fn write_atomically(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    write_through(path, &partial_path(path), |partial| {
        std::fs::write(partial, bytes)
    })
}

/// Has `write` fill the file `partial` and renames it to `path` when that succeeded;
/// removes `partial` on any failure, so that what is left is `path` whole or nothing
/// new. For writers that choose the file themselves (an image encoder that goes by the
/// extension needs a partial name ending in it).
pub fn write_through<E: From<std::io::Error>>(
    path: &Path,
    partial: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let written = write(partial).and_then(|()| Ok(std::fs::rename(partial, path)?));
    if written.is_err() {
        // The write's error is the one to report; a partial file that is already gone
        // (it was never created) is no second failure.
        let _ = std::fs::remove_file(partial);
    }
    written
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

    /// A full disk, as /dev/full is: the write fails, and neither the file nor its
    /// partial file is left behind (a sweep once left a truncated summary.csv and a
    /// report an `.html.partial`).
    #[test]
    fn a_failed_write_leaves_no_file_and_no_partial() {
        let dir = std::env::temp_dir().join(format!("gpuswap-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("summary.csv");
        let partial = partial_path(&file);
        if Path::new("/dev/full").exists() {
            std::os::unix::fs::symlink("/dev/full", &partial).unwrap();
            let e = write_atomically(&file, "point\n0\n").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(28), "ENOSPC: {e}");
            assert!(!file.exists() && partial.symlink_metadata().is_err());
        }
        // An injected writer error: the same, whatever the platform.
        let e = write_through(&file, &partial, |p| {
            std::fs::write(p, "half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "disk full");
        assert!(!file.exists() && !partial.exists());
        write_atomically(&file, "point\n0\n").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "point\n0\n");
        assert!(!partial.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
