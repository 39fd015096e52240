//! Whether the daemon is alive. A daemon that decides, or waits for another tenant's
//! relocation, may leave an allocation or a suspension unanswered for long, and such
//! waits are legitimate however long they last; a daemon whose process is stopped
//! (SIGSTOP, a debugger) or gone (its socket held open by another process) answers
//! nothing ever. So a thread looks at the daemon's process, the one the kernel names
//! for its socket (`SO_PEERCRED`), not at how long anything waits, and after
//! `GPUSWAP_DAEMON_TIMEOUT` (default 30 s; `0`: never) without a sign of life it gives
//! the daemon up: the client then takes its "daemon lost" path.

use std::time::{Duration, Instant};

use crate::diag;

/// How long without a sign of life before the daemon is given up, unless
/// `GPUSWAP_DAEMON_TIMEOUT` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a look at the daemon's process found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sign {
    /// Running or sleeping: it may answer.
    Alive,
    /// Stopped or traced: it answers nothing until continued.
    Stopped,
    /// Ended (a zombie, or its pid gone or taken by another process).
    Ended,
    /// It cannot be seen (another pid namespace, no /proc): taken for alive.
    Unseen,
}

/// The daemon's process: its pid and its start time (field 22 of `/proc/PID/stat`), so
/// that a pid reused by another process is not taken for it.
struct Process {
    pid: u32,
    start: u64,
}

impl Process {
    fn look(&self) -> Sign {
        match stat(self.pid) {
            Some((_, start)) if start != self.start => Sign::Ended,
            Some(('T' | 't', _)) => Sign::Stopped,
            Some(('Z' | 'X' | 'x', _)) => Sign::Ended,
            Some(_) => Sign::Alive,
            // Gone, if this process can see its own.
            None if stat(std::process::id()).is_some() => Sign::Ended,
            None => Sign::Unseen,
        }
    }
}

/// The state letter and start time of process `pid`, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state (field 3) and start time (field 22) of a `/proc/PID/stat` line; the
/// program's name (field 2) may hold spaces and parentheses, so fields are counted from
/// its last `)`.
fn parse_stat(line: &str) -> Option<(char, u64)> {
    let mut fields = line.get(line.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Watches the daemon's process `pid` on a thread of its own until `lost` says the
/// daemon is lost; calls `give_up` with the reason once the process has shown no sign
/// of life for the timeout, and `tick` at every look (at least every second, for the
/// client's periodic reports). Gives nothing up when the timeout is 0 or the process
/// cannot be seen (the daemon is then waited for as long as it takes).
pub(crate) fn watch(
    pid: u32,
    lost: impl Fn() -> bool + Send + 'static,
    give_up: impl FnOnce(String) + Send + 'static,
    tick: impl Fn() + Send + 'static,
) -> Result<(), String> {
    let timeout = timeout();
    let process = stat(pid)
        .filter(|_| pid != 0 && !timeout.is_zero())
        .map(|(_, start)| Process { pid, start });
    // Often enough to give up close to the timeout, seldom enough to cost nothing.
    let every = match process {
        Some(_) => (timeout / 5).clamp(Duration::from_millis(10), Duration::from_secs(1)),
        None => Duration::from_secs(1),
    };
    let silent = move || {
        let mut since: Option<(Instant, Sign)> = None;
        while !lost() {
            std::thread::sleep(every);
            tick();
            let Some(process) = &process else { continue };
            since = match process.look() {
                Sign::Alive | Sign::Unseen => None,
                sign => since.or(Some((Instant::now(), sign))),
            };
            if let Some((at, sign)) = since
                && at.elapsed() >= timeout
            {
                let state = if sign == Sign::Stopped {
                    "stopped"
                } else {
                    "ended"
                };
                return give_up(format!(
                    "its process, pid {pid}, has {state} for {} (GPUSWAP_DAEMON_TIMEOUT)",
                    gpuswap_units::format_ns(timeout.as_nanos() as u64)
                ));
            }
        }
    };
    std::thread::Builder::new()
        .name("gpuswap-watch".into())
        .spawn(silent)
        .map(drop)
        .map_err(|e| format!("cannot start the interposer's watch of its daemon: {e}"))
}

/// `GPUSWAP_DAEMON_TIMEOUT`: seconds, or a duration with a unit (`500ms`); an
/// unreadable value is said and the default taken.
fn timeout() -> Duration {
    let Ok(text) = std::env::var("GPUSWAP_DAEMON_TIMEOUT") else {
        return DEFAULT_TIMEOUT;
    };
    parse_timeout(&text).unwrap_or_else(|e| {
        diag::warn(&format!(
            "GPUSWAP_DAEMON_TIMEOUT={text:?} is not a duration; expected seconds, or {}; \
             the daemon is given up after {} s without a sign of life",
            e.expected,
            DEFAULT_TIMEOUT.as_secs()
        ));
        DEFAULT_TIMEOUT
    })
}

/// A bare number is seconds; anything else is a duration as scenarios write it.
fn parse_timeout(text: &str) -> Result<Duration, gpuswap_units::UnitError> {
    match text.trim().parse::<u64>() {
        Ok(s) => Ok(Duration::from_secs(s)),
        Err(_) => gpuswap_units::parse_ns(text).map(Duration::from_nanos),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_the_state_and_start_even_with_odd_names() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("4242 (x) T 1"), None);
        let own = stat(std::process::id()).unwrap();
        assert!(matches!(own.0, 'R' | 'S'), "{own:?}");
    }

    #[test]
    fn a_process_is_ended_when_its_pid_is_gone_or_reused() {
        let (_, start) = stat(std::process::id()).unwrap();
        let me = Process {
            pid: std::process::id(),
            start,
        };
        assert_eq!(me.look(), Sign::Alive);
        let reused = Process {
            start: start + 1,
            ..me
        };
        assert_eq!(reused.look(), Sign::Ended);
        // Above the kernel's largest pid (2^22).
        let gone = Process {
            pid: 1 << 23,
            start,
        };
        assert_eq!(gone.look(), Sign::Ended);
    }

    #[test]
    fn timeouts_read_as_seconds_or_with_a_unit() {
        assert_eq!(parse_timeout("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_timeout("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_timeout("0").unwrap(), Duration::ZERO);
        assert!(parse_timeout("soon").is_err());
    }
}
