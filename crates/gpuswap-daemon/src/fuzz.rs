//! The wire protocol's fuzz target, shared by `fuzz/` (cargo-fuzz, outside the
//! workspace) and the stable test that replays its corpus (`tests/fuzz_corpus.rs`):
//! bytes become a sequence of inputs to an [`Endpoint`] (connections, frames of every
//! kind with fields taken from the bytes, closes and clock ticks), with the endpoint's
//! invariants checked after each. No socket: the daemon's decisions alone. Any panic,
//! or an invariant broken, is a finding.

use gpuswap_core::{MIB, PolicySettings};
use gpuswap_wire::{ClientMsg, PROTOCOL_VERSION};

use crate::config::DaemonConfig;
use crate::endpoint::{ConnId, Endpoint, Input};

/// The processes' user, which is the daemon's.
const UID: u32 = 1000;

/// Inputs one run takes at most: a corpus entry stays quick to replay.
const MAX_INPUTS: usize = 4096;

/// The bytes, read front to back; exhausted reads give zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.0 = rest;
        first
    }

    fn u64(&mut self) -> u64 {
        // A byte says how wide the number is, so that small and huge values are both
        // reached: 0 to 8 bytes, little-endian.
        let width = usize::from(self.u8() % 9);
        (0..width).fold(0u64, |n, i| n | (u64::from(self.u8()) << (8 * i)))
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Runs the endpoint on `data`; `Err` names the input after which an invariant broke.
/// A panic inside the endpoint propagates: the fuzzer reports it.
pub fn drive(data: &[u8]) -> Result<(), String> {
    let mut bytes = Bytes(data);
    let config = DaemonConfig {
        socket: "unused.sock".into(),
        // Half the runs size the VRAM from the first hello, as a daemon without
        // `--vram` does.
        vram_bytes: (bytes.u8() % 2 == 0).then_some(64 * MIB),
        host_bytes: 256 * MIB,
        chunk_bytes: 2 * MIB,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns: 50_000_000,
        verbose: false,
        contracts: Default::default(),
        gpu_time: Default::default(),
        idle: Default::default(),
        socket_group: None,
        metrics_listen: None,
        max_connections: crate::config::DEFAULT_MAX_CONNECTIONS,
        probe_remote: false,
        device_uuid: None,
    };
    let mut endpoint = Endpoint::new(config, UID);
    let mut now_ns = 0u64;
    for step in 0..MAX_INPUTS {
        if bytes.done() {
            break;
        }
        let conn = ConnId::from(bytes.u8() % 4);
        let input = match bytes.u8() % 16 {
            0 => Input::Accepted {
                conn,
                pid: 100 + conn as u32,
                uid: if bytes.u8() == 0xff { UID + 1 } else { UID },
                cgroups: Vec::new(),
            },
            1 => Input::Gone(conn, "gone".into()),
            2 => {
                now_ns = now_ns.saturating_add(bytes.u64());
                endpoint.handle_timeout(now_ns);
                check(&endpoint, step)?;
                continue;
            }
            kind => Input::Frame(conn, message(kind, &mut bytes)),
        };
        endpoint.handle(now_ns, input);
        check(&endpoint, step)?;
        // What the endpoint hands out is taken, as the serve loop would.
        while endpoint.poll_transmit().is_some() {}
        while endpoint.poll_close().is_some() {}
        while endpoint.poll_event().is_some() {}
    }
    Ok(())
}

/// A client message of kind `kind` (3 to 15), its fields from the bytes.
fn message(kind: u8, bytes: &mut Bytes<'_>) -> ClientMsg {
    match kind {
        3 => ClientMsg::Hello {
            protocol: if bytes.u8() == 0xff {
                1
            } else {
                PROTOCOL_VERSION
            },
            pid: 1,
            name: "fuzz".into(),
            device_total_bytes: bytes.u64(),
            granularity_bytes: bytes.u64(),
            memory_limit_bytes: 0,
            device_uuid: String::new(),
        },
        4 => ClientMsg::Observe {
            protocol: PROTOCOL_VERSION,
        },
        5 | 6 => ClientMsg::Alloc {
            request: bytes.u64(),
            bytes: bytes.u64(),
        },
        7 => ClientMsg::Free {
            buffer: bytes.u64(),
        },
        8 => ClientMsg::Suspended,
        9 => ClientMsg::Relocated { copy: bytes.u64() },
        10 => ClientMsg::RelocateFailed {
            copy: bytes.u64(),
            error: "fuzz".into(),
        },
        11 => ClientMsg::RelocatedBatch {
            batch: bytes.u64(),
            failed: (0..bytes.u8() % 4).map(|_| bytes.u8().into()).collect(),
            error: String::new(),
            elapsed_ns: bytes.u64(),
        },
        12 => ClientMsg::Busy,
        13 => ClientMsg::Idle,
        // Allocations are the most common frame.
        _ => ClientMsg::Alloc {
            request: bytes.u64(),
            bytes: bytes.u64() % (256 * MIB),
        },
    }
}

fn check(endpoint: &Endpoint, step: usize) -> Result<(), String> {
    endpoint
        .check_invariants()
        .map_err(|e| format!("after input {step}: {e}"))
}
