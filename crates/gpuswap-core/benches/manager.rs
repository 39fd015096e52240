//! The manager alone: the cost of decisions, without any simulator.
//!
//! `cargo bench -p gpuswap-core --bench manager`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gpuswap_core::{Action, Manager, Reply, TenantId};

#[path = "../tests/support/mod.rs"]
mod support;

use support::{config, drive, evict_free_return, fill, request};

const MIB: u64 = 1 << 20;

fn bench(c: &mut Criterion) {
    // An allocation without pressure: 64 MiB in 4 MiB chunks into a half-empty GPU, then
    // its free.
    let mut m = Manager::new(config(1 << 30, 4 * MIB));
    let mut id = 0;
    c.bench_function("alloc 64 MiB without pressure (+ free)", |b| {
        b.iter(|| {
            id += 1;
            m.handle_alloc(request(id, 0, 64 * MIB));
            let _map = m.poll_action();
            let Some(Action::Reply(Reply::Grant { buffer, .. })) = m.poll_action() else {
                panic!("fits")
            };
            m.handle_free(TenantId(0), buffer).unwrap();
            let _unmap = m.poll_action();
        })
    });

    // Building an eviction set of 1 GiB of 2 MiB chunks: 8 tenants fill 1 GiB with
    // 16 MiB buffers; a ninth asks for 1 GiB. Measured: the policy loop (victim and
    // chunk selection for 512 chunks) and the relocation plan, not the copies.
    let full = || {
        let mut m = Manager::new(config(1 << 30, 2 * MIB));
        for i in 0..64u64 {
            m.handle_alloc(request(i, (i % 8) as u32, 16 * MIB));
            let _map = m.poll_action();
            assert!(matches!(
                m.poll_action(),
                Some(Action::Reply(Reply::Grant { .. }))
            ));
        }
        m
    };
    c.bench_function("eviction set: 1 GiB of 2 MiB chunks, 8 tenants", |b| {
        b.iter_batched(
            full,
            |mut m| {
                m.handle_alloc(request(1000, 8, 1 << 30));
                m
            },
            BatchSize::LargeInput,
        )
    });
}

/// The books' cost per chunk: a 43 GiB working set in 128 KiB chunks (352,256 chunks)
/// allocated with ample VRAM, then freed.
fn chunks(c: &mut Criterion) {
    let mut group = c.benchmark_group("chunks");
    group.sample_size(10);
    group.bench_function("43 GiB in 128 KiB chunks, ample VRAM (+ free)", |b| {
        b.iter(|| {
            let mut m = Manager::new(config(64 << 30, 128 << 10));
            for i in 0..43 {
                m.handle_alloc(request(i, (i % 4) as u32, 1 << 30));
            }
            m
        })
    });
    group.finish();
}

/// The daemon's decision path at the scale of a big shared GPU: `tenants` tenants fill
/// 10^6 chunks of 2 MiB (about 2 TB of books), then each measured step is one eviction
/// and one return. The state is the same after every step, so the figure is the
/// steady cost of a decision, whatever the number of steps.
fn decisions(c: &mut Criterion) {
    const CHUNKS: u64 = 1_000_000;
    const CHUNK: u64 = 2 * MIB;
    let mut group = c.benchmark_group("decisions at 10^6 chunks");
    group.sample_size(20);
    for tenants in [10u64, 1000] {
        let (mut m, mut id) = fill(config(CHUNKS * CHUNK, CHUNK), tenants, CHUNKS);
        let mut now_ns = 0;
        // Allocate one chunk into full VRAM: the victim policy picks the largest share
        // and one of its chunks goes to host memory. Free it, and the return check
        // brings a chunk back into the room: full again.
        group.bench_function(
            format!("{tenants} tenants: evict for 1 chunk, free, return 1"),
            |b| {
                b.iter(|| {
                    id += 1;
                    now_ns += 1_000_000_000;
                    evict_free_return(&mut m, id, CHUNK, now_ns);
                })
            },
        );
        // The periodic return check with VRAM full: nothing can come back.
        group.bench_function(
            format!("{tenants} tenants: return check, nothing to return"),
            |b| {
                b.iter(|| {
                    now_ns += 1_000_000_000;
                    m.handle_timeout(now_ns);
                    drive(&mut m);
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench, chunks, decisions);
criterion_main!(benches);
