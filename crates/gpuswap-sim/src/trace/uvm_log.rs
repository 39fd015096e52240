//! NVIDIA unified-memory driver fault logs, in the format of uvm-eval
//! (<https://github.com/tallendev/uvm-eval>, MIT, Copyright (c) 2022 Tyler Allen), as
//! tenant programs.
//!
//! uvm-eval's patched `nvidia-uvm` (its `faults` driver) prints every fault batch it
//! services to the kernel log, one record per line:
//! - `s,` opens a batch;
//! - `f,ADDRESS,TIMESTAMP,FAULT_TYPE,ACCESS_TYPE,ACCESS_TYPE_MASK,NUM_INSTANCES,
//!   CLIENT_TYPE,MMU_ENGINE_TYPE,CLIENT_ID,MMU_ENGINE_ID,UTLB_ID,GPC_ID,CHANNEL_ID,VE_ID`
//!   is one fault of the batch after the driver coalesced duplicates from the same uTLB
//!   and sorted the batch: the address in hexadecimal (page aligned), the GPU's timer
//!   when the MMU wrote the fault (ns), the access (0 prefetch, 1 read, 2 write, 3 weak
//!   and 4 strong atomic), then where it came from;
//! - `b,SERVICE_NS,STATUS` closes the batch (older versions print a bare `b,`);
//! - `p,ADDRESS` and `e,ADDRESS` (prefetched and evicted addresses) may come anywhere.
//!
//! Two forms of the file are read: uvm-eval's CSV (`tools/sys2csv/log2csv.sh`: VA
//! range lines `0xSTART, BYTES` first, then only the records), and the raw kernel log
//! its `syslogger` writes (`/dev/kmsg` lines `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;
//! MESSAGE`), where messages that are not records (other kernel messages) are skipped.
//! Anything else is an error naming its line: a fault log read half is no trace.
//!
//! The log's types are in `faults.rs`, the replay in `replay.rs`.

mod faults;
mod replay;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use faults::{AccessType, Batch, Fault, FaultLog};

/// What is wrong with a fault log.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FaultLogError {
    /// A line is not UTF-8 text.
    #[error("line {line}: not UTF-8 text; expected a text log")]
    NotText {
        /// 1-based line number.
        line: usize,
    },
    /// A line is no record this format has.
    #[error(
        "line {line}: unknown record type {found:?}; expected s, f, b, p or e (uvm-eval's records) or a VA range line (0xSTART, BYTES)"
    )]
    UnknownRecord {
        /// 1-based line number.
        line: usize,
        /// The line's first field.
        found: String,
    },
    /// A record has another number of fields than its type takes (a truncated line).
    #[error("line {line}: `{record}` record with {found} fields; expected {expected}")]
    FieldCount {
        /// 1-based line number.
        line: usize,
        /// The record type.
        record: String,
        /// Fields after the type.
        found: usize,
        /// What the type takes.
        expected: &'static str,
    },
    /// A field does not hold what it should.
    #[error("line {line}: {field} is {found:?}; expected {expected}")]
    Field {
        /// 1-based line number.
        line: usize,
        /// The field's name.
        field: &'static str,
        /// What it holds.
        found: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// A record where the batch structure does not allow it.
    #[error("line {line}: {message}")]
    Order {
        /// 1-based line number.
        line: usize,
        /// What is out of place, and what was expected.
        message: String,
    },
    /// The log ends inside a batch.
    #[error(
        "line {line}: the batch started here never ends; expected its `b,` record (is the log truncated?)"
    )]
    Unterminated {
        /// The line of the batch's `s,` record.
        line: usize,
    },
    /// The log holds no batch.
    #[error(
        "no fault batch in the log; expected `s,`, `f,...` and `b,...` records (uvm-eval's faults driver writes them)"
    )]
    Empty,
}

/// The fields of an `f` record after the type, by name (uvm-eval's documentation of
/// its faults driver).
const FAULT_FIELDS: [&str; 14] = [
    "address",
    "timestamp",
    "fault_type",
    "access_type",
    "access_type_mask",
    "num_instances",
    "client_type",
    "mmu_engine_type",
    "client_id",
    "mmu_engine_id",
    "utlb_id",
    "gpc_id",
    "channel_id",
    "ve_id",
];

impl FaultLog {
    /// Reads a log in either form (see the module documentation).
    pub fn parse(bytes: &[u8]) -> Result<Self, FaultLogError> {
        let mut reader = Reader::default();
        let mut kernel_log = false;
        for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
            let line = i + 1;
            let text = std::str::from_utf8(raw).map_err(|_| FaultLogError::NotText { line })?;
            // /dev/kmsg continues a device's message on lines of " KEY=VALUE".
            if kernel_log && text.starts_with(' ') && text.contains('=') {
                continue;
            }
            let (message, kmsg) = match kmsg_message(text) {
                Some(message) => (message, true),
                None => (text, false),
            };
            kernel_log |= kmsg;
            let message = message.trim();
            if message.is_empty() {
                continue;
            }
            let (kind, rest) = message.split_once(',').unwrap_or((message, ""));
            let fields: Vec<&str> = if rest.trim().is_empty() {
                Vec::new()
            } else {
                rest.split(',').map(str::trim).collect()
            };
            reader.record(line, kind.trim(), &fields, kmsg)?;
        }
        if let Some((line, _)) = reader.open {
            return Err(FaultLogError::Unterminated { line });
        }
        if reader.batches.is_empty() {
            return Err(FaultLogError::Empty);
        }
        Ok(Self {
            batches: reader.batches,
        })
    }
}

/// A log read so far: its batches, and the open batch with the line of its `s,`.
#[derive(Default)]
struct Reader {
    batches: Vec<Batch>,
    open: Option<(usize, Batch)>,
}

impl Reader {
    /// Takes the record of `kind` with `fields` on `line`, a kernel log's message where
    /// `kmsg` (which may hold other messages besides the records).
    fn record(
        &mut self,
        line: usize,
        kind: &str,
        fields: &[&str],
        kmsg: bool,
    ) -> Result<(), FaultLogError> {
        let count = |expected: &'static str| FaultLogError::FieldCount {
            line,
            record: kind.into(),
            found: fields.len(),
            expected,
        };
        match kind {
            "s" => {
                if !fields.is_empty() {
                    return Err(count("none"));
                }
                if let Some((start, _)) = self.open {
                    return Err(FaultLogError::Order {
                        line,
                        message: format!(
                            "`s,` inside the batch started at line {start}; expected its `b,` first"
                        ),
                    });
                }
                self.open = Some((line, Batch::default()));
            }
            "f" => {
                if fields.len() != FAULT_FIELDS.len() {
                    return Err(count(
                        "14 (address, timestamp, fault_type, access_type, ...)",
                    ));
                }
                let fault = fault(line, fields)?;
                let Some((_, batch)) = &mut self.open else {
                    return Err(FaultLogError::Order {
                        line,
                        message: "`f,` outside a batch; expected `s,` before it".into(),
                    });
                };
                batch.faults.push(fault);
            }
            "b" => {
                if !matches!(fields.len(), 0 | 2) {
                    return Err(count("2 (service ns, status), or none (older driver)"));
                }
                for (field, value) in ["service_ns", "status"].into_iter().zip(fields) {
                    number(line, field, value, 10)?;
                }
                let Some((_, batch)) = self.open.take() else {
                    return Err(FaultLogError::Order {
                        line,
                        message: "`b,` without a batch; expected `s,` before it".into(),
                    });
                };
                self.batches.push(batch);
            }
            "p" | "e" => {
                if fields.len() != 1 {
                    return Err(count("1 (an address)"));
                }
                number(line, "address", fields[0], 16)?;
            }
            _ if kmsg && !is_record_type(kind) => {}
            _ if !kmsg && kind.starts_with("0x") => {
                number(line, "range start", kind, 16)?;
                if fields.len() != 1 {
                    return Err(count("1 (the range's bytes)"));
                }
                number(line, "range bytes", fields[0], 10)?;
            }
            _ => {
                return Err(FaultLogError::UnknownRecord {
                    line,
                    found: shown(kind),
                });
            }
        }
        Ok(())
    }
}

/// The message of a `/dev/kmsg` line (`PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,...];
/// MESSAGE`), or `None` for a line of another form.
fn kmsg_message(line: &str) -> Option<&str> {
    let (prefix, message) = line.split_once(';')?;
    let fields: Vec<&str> = prefix.split(',').collect();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (fields.len() >= 4 && fields[..3].iter().all(|f| numeric(f))).then_some(message)
}

/// Whether a kernel message's first field looks like a record type (one letter), so
/// that an unknown one is an error rather than another kernel message.
fn is_record_type(kind: &str) -> bool {
    kind.len() == 1 && kind.bytes().all(|b| b.is_ascii_alphabetic())
}

/// An `f` record's fault, from its fields after the type.
fn fault(line: usize, fields: &[&str]) -> Result<Fault, FaultLogError> {
    // Every field is checked, so that a shifted or garbled line is not half read.
    for (field, value) in FAULT_FIELDS.iter().zip(fields).skip(2) {
        if value.parse::<i64>().is_err() {
            return Err(FaultLogError::Field {
                line,
                field,
                found: shown(value),
                expected: "a whole number",
            });
        }
    }
    let access = match fields[3] {
        "0" => AccessType::Prefetch,
        "1" => AccessType::Read,
        "2" => AccessType::Write,
        "3" => AccessType::AtomicWeak,
        "4" => AccessType::AtomicStrong,
        other => {
            return Err(FaultLogError::Field {
                line,
                field: "access_type",
                found: shown(other),
                expected: "0 (prefetch), 1 (read), 2 (write), 3 or 4 (atomic)",
            });
        }
    };
    Ok(Fault {
        address: number(line, "address", fields[0], 16)?,
        timestamp_ns: number(line, "timestamp", fields[1], 10)?,
        access,
    })
}

/// A number of at most 64 bits in `radix` (16: an address, with or without `0x`; 10:
/// a count or a time, without a sign).
fn number(line: usize, field: &'static str, value: &str, radix: u32) -> Result<u64, FaultLogError> {
    let digits = match radix {
        16 => value.strip_prefix("0x").unwrap_or(value),
        _ => value,
    };
    // `from_str_radix` alone would also take a sign.
    let parsed = digits
        .chars()
        .all(|c| c.is_digit(radix))
        .then(|| u64::from_str_radix(digits, radix).ok())
        .flatten();
    parsed.ok_or_else(|| FaultLogError::Field {
        line,
        field,
        found: shown(value),
        expected: match radix {
            16 => "a hexadecimal address of at most 64 bits",
            _ => "a whole number of at most 64 bits",
        },
    })
}

/// The start of what a line holds, for an error message.
fn shown(text: &str) -> String {
    const MAX_CHARS: usize = 40;
    let mut shown: String = text.chars().take(MAX_CHARS).collect();
    if text.chars().nth(MAX_CHARS).is_some() {
        shown.push_str("...");
    }
    shown
}
