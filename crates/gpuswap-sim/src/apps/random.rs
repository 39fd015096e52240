//! `random`: RandomAccess (HPCC GUPS) style updates of a large table at uniformly
//! random places.
//!
//! Buffers: `table` (T 8-byte words, T a power of two) and `updates` (T/8 precomputed
//! random words, read in order). The host initialises both (setup: H2D) and reads the
//! table after (teardown: D2H). The phase body is one launch of `update` and a
//! synchronization: one thread per update reads its word of `updates` (coalesced), and
//! XORs it into `table[word mod T]` (a read-modify-write of an isolated word: a 128-byte
//! line read, a 32-byte sector written, again for a line touched again unless the
//! device's L2 still holds it: [`DeviceShape::random_bytes`]). HPCC performs 4T updates
//! in batches; one batch of T/8 per repetition is this model's choice, small enough that
//! the updates buffer stays a minor part of the footprint. Compute: about 12 instructions per update (index, load, mask,
//! address, load, XOR, store): memory bound, dominated by the table's line reads.
//!
//! (The UVM Smart "ra" benchmark of `spec/apps.md` differs in shape: three 4 MiB float
//! arrays and 1 active thread in 100; this model follows HPCC instead.)

use super::common::{d2h, h2d, parse_size, phased, random_access, uniform};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, Program};

/// The random app.
pub struct Random;

const HELP: &str = "default (2^24 table words: 128 MiB table + 16 MiB of updates), or a \
                    number of 8-byte table words (a power of two, 1024 to 268435456)";
/// Table word size.
const WORD_BYTES: u64 = 8;
/// Updates per table word in one phase iteration: 1/8.
const UPDATES_PER_WORD_INVERSE: u64 = 8;
/// Instructions per update.
const OPS_PER_UPDATE: u64 = 12;
/// Table size limits in words (2 GiB table at most).
const MIN_WORDS: u64 = 1 << 10;
const MAX_WORDS: u64 = 1 << 28;

impl AppModel for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn description(&self) -> &'static str {
        "Synthetic RandomAccess (GUPS): read-modify-write of a large table at random places"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, device: DeviceShape) -> Result<Program, SizeError> {
        let named = [("default", 1 << 24)];
        let words = parse_size(self.name(), HELP, size, &named, |n| {
            if n.is_power_of_two() && (MIN_WORDS..=MAX_WORDS).contains(&n) {
                Ok(n)
            } else {
                Err(format!(
                    "{n} words is not a power of two from {MIN_WORDS} to {MAX_WORDS}"
                ))
            }
        })?;
        Ok(program(words, repeat, device))
    }
}

fn program(words: u64, repeat: u32, device: DeviceShape) -> Program {
    let mut p = Program::default();
    let table_bytes = words * WORD_BYTES;
    let count = words / UPDATES_PER_WORD_INVERSE;
    let updates_bytes = count * WORD_BYTES;
    let table = p.buffer("table", table_bytes);
    let updates = p.buffer("updates", updates_bytes);
    let update = Kernel {
        name: "update".into(),
        ops: count * OPS_PER_UPDATE,
        accesses: vec![
            uniform(updates, updates_bytes, 0, AccessOrder::Linear),
            random_access(device, table, table_bytes, (count as f64, count as f64)),
        ],
        phases: Vec::new(),
        outer_loop: Default::default(),
    };
    let setup = vec![
        Op::Alloc(table),
        Op::Alloc(updates),
        h2d(table, table_bytes),
        h2d(updates, updates_bytes),
    ];
    let body = vec![Op::Launch(update), Op::Sync];
    let teardown = vec![d2h(table, table_bytes), Op::Free(table), Op::Free(updates)];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, mib, phase_body, rejects};
    use crate::program::Access;

    #[test]
    fn footprint_is_table_plus_an_eighth() {
        assert_eq!(mib(&check_app(&Random, "default")), 144.0);
        assert_eq!(
            check_app(&Random, "1024").peak_allocated_bytes(),
            8192 + 1024
        );
    }

    #[test]
    fn table_updates_are_random_lines_the_stream_is_linear() {
        let p = Random.program("default", 1, gtx480()).unwrap();
        let Op::Launch(k) = &phase_body(&p, 1)[0] else {
            panic!("a launch")
        };
        let [stream, table]: &[Access; 2] = k.accesses.as_slice().try_into().unwrap();
        assert_eq!(stream.order, AccessOrder::Linear);
        assert_eq!(table.order, AccessOrder::Random);
        // 2^21 updates into a 128 MiB table: the GTX 480's L2 holds 0.6 % of it, so
        // nearly every update moves a 128-byte line in and a 32-byte sector out.
        let updates = f64::from(1 << 21);
        assert!((table.read_bytes as f64 / (updates * 128.0) - 1.0).abs() < 0.01);
        assert!((table.write_bytes as f64 / (updates * 32.0) - 1.0).abs() < 0.01);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&Random, "1000", "power of two");
        rejects(&Random, "512", "power of two");
        rejects(&Random, "rodinia", "not a size");
    }
}
