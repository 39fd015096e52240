//! Standard output and standard error for every command: a reader that stops early
//! (`| head`) is not an error, as for other command-line tools; any other write error
//! on standard output is (a full disk); and neither panics as `println!` and
//! `eprintln!` do.

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

/// Writes a line to standard error. A closed or full standard error loses it: there is
/// nowhere left to say so, and the exit status still tells what happened.
pub fn error_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}").and_then(|()| err.flush());
}

/// `eprintln!` without its panic when standard error is closed or full
/// ([`error_line`]). Declared first in `main.rs`, so every module sees it.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::stdout::error_line(&format!($($arg)*))
    };
}
