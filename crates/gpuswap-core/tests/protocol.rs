//! The core driven by a driver that delays its answers, interleaves them with new
//! requests in random order, and sends answers nobody asked for. Whatever the order, the
//! manager keeps its books, answers every request exactly once, maps before it grants,
//! keeps at most one copy outstanding, and refuses a bogus answer without changing state.

use std::collections::{BTreeMap, BTreeSet};

use gpuswap_core::{
    Action, AllocRequest, BufferId, BufferKind, CopyId, Dma, Execution, KernelStats, Manager,
    ManagerConfig, Mapping, PolicySettings, ProtocolError, Reply, RequestId, TenantId,
};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

/// One thing the driver does next.
#[derive(Clone, Debug)]
enum Step {
    Alloc {
        tenant: u32,
        mib: u64,
    },
    Free {
        pick: usize,
    },
    /// Answer the outstanding suspension or copy, if any.
    Answer,
    /// Answer something nobody asked for.
    Bogus {
        copy: u64,
        tenant: u32,
    },
    Timeout,
    KernelFinished {
        tenant: u32,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u32..3, 1u64..24).prop_map(|(tenant, mib)| Step::Alloc { tenant, mib }),
        1 => any::<usize>().prop_map(|pick| Step::Free { pick }),
        4 => Just(Step::Answer),
        1 => (0u64..50, 0u32..3).prop_map(|(copy, tenant)| Step::Bogus { copy, tenant }),
        1 => Just(Step::Timeout),
        1 => (0u32..3).prop_map(|tenant| Step::KernelFinished { tenant }),
    ]
}

/// What the driver has seen and still owes.
#[derive(Default)]
struct Driver {
    suspend: Option<TenantId>,
    copy: Option<CopyId>,
    suspended: BTreeSet<TenantId>,
    mapped: BTreeSet<BufferId>,
    answered: BTreeMap<RequestId, u32>,
    live: Vec<(TenantId, BufferId)>,
}

impl Driver {
    /// Takes every action the manager has decided, checking the protocol as it goes.
    fn drain(&mut self, m: &mut Manager) -> Result<(), TestCaseError> {
        while let Some(action) = m.poll_action() {
            match action {
                Action::Execution(Execution::Suspend { tenant, .. }) => {
                    prop_assert!(self.suspend.is_none() && self.copy.is_none());
                    prop_assert!(self.suspended.insert(tenant), "{tenant} suspended twice");
                    self.suspend = Some(tenant);
                }
                Action::Execution(Execution::Resume { tenant }) => {
                    prop_assert!(self.suspended.remove(&tenant), "{tenant} not suspended");
                }
                Action::Execution(Execution::PolicyRan { .. }) => {}
                Action::Dma(Dma::Copy { copy, .. }) => {
                    prop_assert!(self.copy.is_none(), "two copies outstanding");
                    self.copy = Some(copy);
                }
                Action::Mapping(Mapping::Map { buffer, .. }) => {
                    prop_assert!(self.mapped.insert(buffer));
                }
                Action::Mapping(Mapping::Remap { chunk, .. }) => {
                    // Chunks of freed buffers are never remapped.
                    prop_assert!(
                        self.mapped.contains(&chunk.buffer),
                        "remap of unmapped {chunk:?}"
                    );
                }
                Action::Mapping(Mapping::Unmap { buffer, .. }) => {
                    prop_assert!(self.mapped.remove(&buffer));
                }
                Action::Reply(Reply::Grant {
                    request,
                    tenant,
                    buffer,
                }) => {
                    prop_assert!(self.mapped.contains(&buffer), "granted before mapped");
                    *self.answered.entry(request).or_default() += 1;
                    self.live.push((tenant, buffer));
                }
                Action::Reply(Reply::Fail { request, .. }) => {
                    *self.answered.entry(request).or_default() += 1;
                }
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
        Ok(())
    }

    /// Answers what is outstanding.
    fn answer(&mut self, m: &mut Manager) -> Result<(), TestCaseError> {
        if let Some(tenant) = self.suspend.take() {
            prop_assert_eq!(m.handle_suspended(tenant), Ok(()));
        } else if let Some(copy) = self.copy.take() {
            prop_assert_eq!(m.handle_copy_done(copy), Ok(()));
        }
        self.drain(m)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_answer_order_keeps_the_protocol(steps in proptest::collection::vec(step(), 1..120)) {
        let mut m = Manager::new(ManagerConfig {
            vram_bytes: 48 * MIB,
            host_bytes: 1 << 40,
            chunk_bytes: 4 * MIB,
            policy: PolicySettings::named("gpuswap"),
            return_interval_ns: 1_000,
            seed: 3,
        });
        let mut d = Driver::default();
        let mut requests = 0u64;
        let mut now = 0;
        for s in steps {
            match s {
                Step::Alloc { tenant, mib } => {
                    m.handle_alloc(AllocRequest {
                        request: RequestId(requests),
                        tenant: TenantId(tenant),
                        bytes: mib * MIB,
                        kind: BufferKind::Device,
                        priority: None,
                        chunk_priorities: Vec::new(),
                    });
                    requests += 1;
                }
                Step::Free { pick } if !d.live.is_empty() => {
                    let (tenant, buffer) = d.live.remove(pick % d.live.len());
                    prop_assert_eq!(m.handle_free(tenant, buffer), Ok(()));
                }
                Step::Free { .. } => {}
                Step::Answer => d.answer(&mut m)?,
                Step::Bogus { copy, tenant } => {
                    let (copy, tenant) = (CopyId(copy), TenantId(tenant));
                    let before = (m.vram_used_bytes(), m.relocating());
                    if d.copy != Some(copy) {
                        let refused = matches!(
                            m.handle_copy_done(copy),
                            Err(ProtocolError::UnexpectedCopyDone { .. })
                        );
                        prop_assert!(refused, "a bogus copy was accepted");
                    }
                    if d.suspend != Some(tenant) {
                        prop_assert_eq!(
                            m.handle_suspended(tenant),
                            Err(ProtocolError::UnexpectedSuspended { tenant })
                        );
                    }
                    prop_assert_eq!(before, (m.vram_used_bytes(), m.relocating()));
                }
                Step::Timeout => {
                    now += 1_000;
                    m.handle_timeout(now);
                }
                Step::KernelFinished { tenant } => {
                    m.handle_kernel_finished(TenantId(tenant), &KernelStats::default());
                }
            }
            d.drain(&mut m)?;
            prop_assert_eq!(m.check_invariants(), Ok(()));
        }
        // Answer everything still owed: every request is then answered exactly once and
        // every suspended tenant resumed.
        while d.suspend.is_some() || d.copy.is_some() {
            d.answer(&mut m)?;
        }
        prop_assert!(!m.relocating());
        prop_assert_eq!(d.answered.len() as u64, requests);
        prop_assert!(d.answered.values().all(|n| *n == 1));
        prop_assert!(d.suspended.is_empty());
        prop_assert_eq!(m.check_invariants(), Ok(()));
    }
}
