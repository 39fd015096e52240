//! Synthetic PyTorch memory snapshots, made here so that the project ships fixtures of
//! its own (no third-party file): a training job and an inference server, in the shape
//! `torch.cuda.memory._dump_snapshot` writes (PyTorch 2.1 or later: events carry
//! `time_us`). `scenarios/traces/*.pickle` are these bytes; a test keeps them equal.

use std::collections::BTreeMap;

use serde_pickle::{HashableValue, SerOptions, Value};

const MIB: u64 = 1 << 20;

/// Records allocator events as the caching allocator would, on one device and stream.
#[derive(Default)]
pub struct SnapshotBuilder {
    events: Vec<Value>,
    /// Live segments: address to size and live blocks (address to size).
    segments: BTreeMap<u64, (u64, BTreeMap<u64, u64>)>,
    next_addr: u64,
    now_us: u64,
    peak_bytes: u64,
    /// Events carry no `time_us`, as PyTorch before 2.1 writes them.
    untimed: bool,
}

fn dict(entries: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.into()), v))
            .collect(),
    )
}

fn int(n: u64) -> Value {
    Value::I64(n as i64)
}

impl SnapshotBuilder {
    /// A builder whose first segment lands at a typical device address.
    pub fn new() -> Self {
        Self {
            next_addr: 0x7f00_0000_0000,
            ..Self::default()
        }
    }

    fn event(&mut self, action: &str, addr: u64, size: u64) {
        let mut fields = vec![
            ("action", Value::String(action.into())),
            ("addr", int(addr)),
            ("size", int(size)),
            ("stream", int(0)),
            ("frames", Value::List(Vec::new())),
        ];
        if !self.untimed {
            fields.push(("time_us", int(self.now_us)));
        }
        self.events.push(dict(fields));
    }

    /// Events from now on carry no `time_us`, as PyTorch before 2.1 writes them.
    pub fn untimed(&mut self) {
        self.untimed = true;
    }

    /// Time passes.
    pub fn wait_us(&mut self, us: u64) {
        self.now_us += us;
    }

    /// A segment of `bytes` from the driver; returns its address.
    pub fn segment(&mut self, bytes: u64) -> u64 {
        let addr = self.next_addr;
        // Segments are 2 MiB aligned, as cudaMalloc's large allocations.
        self.next_addr += bytes.next_multiple_of(2 * MIB);
        self.segments.insert(addr, (bytes, BTreeMap::new()));
        self.event("segment_alloc", addr, bytes);
        let held: u64 = self.segments.values().map(|s| s.0).sum();
        self.peak_bytes = self.peak_bytes.max(held);
        addr
    }

    /// The segment at `addr` goes back to the driver.
    pub fn free_segment(&mut self, addr: u64) {
        let (bytes, _) = self.segments.remove(&addr).expect("a live segment");
        self.event("segment_free", addr, bytes);
    }

    /// A block of `bytes` at `offset` in the segment at `segment`; returns its address.
    pub fn alloc(&mut self, segment: u64, offset: u64, bytes: u64) -> u64 {
        let addr = segment + offset;
        self.segments
            .get_mut(&segment)
            .expect("a live segment")
            .1
            .insert(addr, bytes);
        self.event("alloc", addr, bytes);
        addr
    }

    /// The tensor at `addr` (in the segment at `segment`) is freed.
    pub fn free(&mut self, segment: u64, addr: u64) {
        let bytes = self
            .segments
            .get_mut(&segment)
            .expect("a live segment")
            .1
            .remove(&addr)
            .expect("a live block");
        self.event("free_requested", addr, bytes);
        self.event("free_completed", addr, bytes);
    }

    /// The most memory held from the driver at once so far.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }

    /// The snapshot, pickled as `_dump_snapshot` does (protocol 3).
    pub fn pickle(&self) -> Vec<u8> {
        let segments = self
            .segments
            .iter()
            .map(|(&addr, (bytes, blocks))| {
                let allocated: u64 = blocks.values().sum();
                let mut listed = Vec::new();
                let mut at = addr;
                for (&b, &size) in blocks {
                    if b > at {
                        listed.push(block(at, b - at, "inactive"));
                    }
                    listed.push(block(b, size, "active_allocated"));
                    at = b + size;
                }
                if at < addr + bytes {
                    listed.push(block(at, addr + bytes - at, "inactive"));
                }
                dict(vec![
                    ("device", int(0)),
                    ("address", int(addr)),
                    ("total_size", int(*bytes)),
                    ("allocated_size", int(allocated)),
                    ("active_size", int(allocated)),
                    ("requested_size", int(allocated)),
                    ("stream", int(0)),
                    ("segment_type", Value::String("large".into())),
                    ("blocks", Value::List(listed)),
                ])
            })
            .collect();
        let snapshot = dict(vec![
            ("segments", Value::List(segments)),
            (
                "device_traces",
                Value::List(vec![Value::List(self.events.clone())]),
            ),
        ]);
        serde_pickle::value_to_vec(&snapshot, SerOptions::new()).expect("plain values pickle")
    }
}

fn block(addr: u64, size: u64, state: &str) -> Value {
    dict(vec![
        ("address", int(addr)),
        ("size", int(size)),
        ("requested_size", int(size)),
        ("state", Value::String(state.into())),
    ])
}

/// A training job: 1.5 GiB of weights, 3 GiB of optimizer state, and per iteration
/// eight 256 MiB activations (forward) freed in reverse (backward) in a 2 GiB cached
/// segment, 20 iterations of 60 ms. Peak: 6.5 GiB.
pub fn training() -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new();
    let weights = b.segment(1536 * MIB);
    b.alloc(weights, 0, 1536 * MIB);
    b.wait_us(2_000);
    let optimizer = b.segment(3072 * MIB);
    b.alloc(optimizer, 0, 3072 * MIB);
    let activations = b.segment(2048 * MIB);
    for _ in 0..20 {
        let mut live = Vec::new();
        for layer in 0..8 {
            b.wait_us(2_500);
            live.push(b.alloc(activations, layer * 256 * MIB, 256 * MIB));
        }
        for addr in live.into_iter().rev() {
            b.wait_us(5_000);
            b.free(activations, addr);
        }
    }
    b.free_segment(activations);
    b
}

/// An inference server: 2 GiB of weights and a 3 GiB key-value cache segment; 40
/// requests, one every 25 ms, each holding a cache block of 512 MiB to 2.5 GiB for
/// 15 ms. Peak: 5 GiB.
pub fn inference() -> SnapshotBuilder {
    let mut b = SnapshotBuilder::new();
    let weights = b.segment(2048 * MIB);
    b.alloc(weights, 0, 2048 * MIB);
    let cache = b.segment(3072 * MIB);
    for request in 0..40u64 {
        b.wait_us(10_000);
        let bytes = (512 + (request * 7 % 5) * 512) * MIB;
        let kv = b.alloc(cache, 0, bytes);
        b.wait_us(15_000);
        b.free(cache, kv);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixtures the project ships are these builders' bytes; `GPUSWAP_BLESS=1`
    /// writes them anew.
    #[test]
    fn the_shipped_fixtures_are_the_builders_snapshots() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces");
        for (file, builder) in [("train.pickle", training()), ("infer.pickle", inference())] {
            let path = dir.join(file);
            let bytes = builder.pickle();
            if std::env::var_os("GPUSWAP_BLESS").is_some() {
                std::fs::write(&path, &bytes).unwrap();
            }
            let shipped = std::fs::read(&path).unwrap();
            assert!(
                shipped == bytes,
                "{} differs; GPUSWAP_BLESS=1 rewrites it",
                path.display()
            );
        }
    }
}
