//! The daemon's log: a leaf, so that the driver and the serve loop write it alike.

/// Writes a line of the daemon's log to standard error. A daemon outlives the terminal
/// that started it: a closed or full standard error loses the line, never the daemon
/// (`eprintln!` would panic).
pub(crate) fn log(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "gpuswapd: {args}");
}
