//! `pagedos`: PILOT's interference generator pageDoS (`../shared/spec/pilot.md`), an
//! endless kernel that sweeps every 4 KiB page of its managed buffer in turn to keep
//! pulling its pages into VRAM. It runs until every other tenant has ended
//! (`AppModel::endless`), so it interferes for as long as there is anyone to interfere
//! with.
//!
//! One buffer `pages` of the size asked (in MiB; the paper does not give pageDoS's
//! buffer size, so `default` = 1 GiB is ours, unconfirmed). No host copies: the pages
//! start in host memory, as a managed buffer the host never touched would be first
//! touched by the GPU. The endless kernel is modelled as a loop of launches of `sweep`,
//! one linear pass over every page each, with no synchronization between them (the
//! channel always holds the next sweep). A sweep touches one element per page; the
//! model charges a linear read of the whole buffer, which overstates its VRAM traffic
//! but not its page touches (one per page, in address order), the part that interferes.
//! Compute: about 8 instructions per page (index, stride, load, loop test).

use super::common::{parse_size, phased, uniform, within};
use super::model::{AppModel, SizeError};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Kernel, Op, OuterLoop, Program};

/// The pagedos app.
pub struct PageDos;

const HELP: &str = "default (1024 MiB), or a buffer size in MiB (1 to 65536)";
const MIB: u64 = 1 << 20;
/// Bytes per page it sweeps.
const PAGE_BYTES: u64 = 4096;
/// Instructions per page touched.
const OPS_PER_PAGE: u64 = 8;
/// Largest buffer accepted, in MiB: 64 GiB.
const MAX_MIB: u64 = 65536;

impl AppModel for PageDos {
    fn name(&self) -> &'static str {
        "pagedos"
    }

    fn description(&self) -> &'static str {
        "PILOT's interference generator: sweeps every page of its managed buffer until the others end"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn endless(&self) -> bool {
        true
    }

    fn program(
        &self,
        size: &str,
        _repeat: u32,
        _device: DeviceShape,
    ) -> Result<Program, SizeError> {
        let mib = parse_size(self.name(), HELP, size, &[("default", 1024)], |n| {
            within(n, 1..=MAX_MIB, format!("{n} MiB"))
        })?;
        Ok(program(mib * MIB))
    }
}

fn program(bytes: u64) -> Program {
    let mut p = Program::default();
    let pages = p.buffer("pages", bytes);
    let sweep = Kernel {
        name: "sweep".into(),
        ops: bytes / PAGE_BYTES * OPS_PER_PAGE,
        accesses: vec![uniform(pages, bytes, 0, AccessOrder::Linear)],
        phases: Vec::new(),
        outer_loop: OuterLoop::uniform(bytes / PAGE_BYTES, 1),
    };
    // Endless: the engine ends it when the others have ended.
    p.ops = phased(
        vec![Op::Alloc(pages)],
        u32::MAX,
        vec![Op::Launch(sweep)],
        vec![Op::Free(pages)],
    );
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, mib, phase_body, rejects, traffic};

    #[test]
    fn one_buffer_swept_linearly_without_end() {
        assert_eq!(mib(&check_app(&PageDos, "default")), 1024.0);
        let p = PageDos.program("2", 1, gtx480()).unwrap();
        assert_eq!(traffic(phase_body(&p, u32::MAX), 1), vec![(2 * MIB, 0)]);
        assert!(PageDos.endless());
        assert!(!crate::apps::find("bfs").unwrap().endless());
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&PageDos, "0", "1 to");
        rejects(&PageDos, "70000", "1 to");
    }
}
