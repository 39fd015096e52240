//! Standard output for every command: a reader that stops early (`| head`) is not an
//! error, as for other command-line tools; any other write error is (a full disk), and
//! it never panics as `println!` does.

use std::io::Write;

/// Writes `text` to standard output; the error says why it could not.
pub fn write(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write the output: {e}")),
    }
}
