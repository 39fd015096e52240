//! `gpuswap place`: the vGPU placement calculator, for operators and for checking the
//! algorithms by hand (`gpuswap_core::placement`).

use gpuswap_core::placement::{
    Demand, PLACEMENTS, find_placement, round_robin_copies, shared_slots,
};

/// Settings of `gpuswap place`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gpuswap place dymgpu-size --slots 5 --sizes 4,4,3,2            # start slots 0 1 1 1\n  \
    gpuswap place gscale --slots 12 --sizes 6,6,6,6 --rounds 10 --json\n  \
    gpuswap place dymgpu-util --slots 5 --sizes 4,4,3,2 --utilization 0.9,0.2,0.5,0.7")]
pub struct PlaceArgs {
    /// The algorithm: gvirt, gscale, dymgpu-size or dymgpu-util.
    pub algorithm: String,
    /// Slots of high graphics memory (64 MB each on the spec's device).
    #[arg(long)]
    pub slots: u32,
    /// Slots each vGPU needs, in order (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub sizes: Vec<u32>,
    /// Each vGPU's utilization, 0 to 1 (comma-separated; dymgpu-util sorts by it).
    #[arg(long, value_delimiter = ',')]
    pub utilization: Vec<f64>,
    /// Also count the slot copies of N round-robin rounds in input order.
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Print `{"positions": [...], "copies": N}` (copies null without --rounds).
    #[arg(long)]
    pub json: bool,
}

/// The most slots `place` takes: the devices modelled have tens, and the placement
/// keeps a count per slot, so 2^32 of them would take 16 GiB.
const MAX_SLOTS: u32 = 1 << 16;

/// The placement as text or JSON; the error is bad input.
pub fn run(args: &PlaceArgs) -> Result<String, String> {
    let entry = find_placement(&args.algorithm).ok_or_else(|| {
        let names: Vec<_> = PLACEMENTS.iter().map(|p| p.name).collect();
        format!(
            "unknown algorithm {:?}; expected one of: {}",
            args.algorithm,
            names.join(", ")
        )
    })?;
    if !(1..=MAX_SLOTS).contains(&args.slots) {
        return Err(format!(
            "--slots {}: expected 1 to {MAX_SLOTS} (a device has tens: 54 on hd530)",
            args.slots
        ));
    }
    if !args.utilization.is_empty() && args.utilization.len() != args.sizes.len() {
        return Err(format!(
            "--utilization: expected one value per vGPU ({}), got {}",
            args.sizes.len(),
            args.utilization.len()
        ));
    }
    if let Some(u) = args.utilization.iter().find(|u| !(0.0..=1.0).contains(*u)) {
        return Err(format!(
            "--utilization: expected values from 0 to 1, got {u}"
        ));
    }
    let demands: Vec<Demand> = args
        .sizes
        .iter()
        .enumerate()
        .map(|(i, s)| Demand {
            slots: *s,
            utilization: args.utilization.get(i).copied().unwrap_or(0.0),
        })
        .collect();
    let positions = entry
        .build()
        .place(args.slots, &demands)
        .map_err(|e| format!("{}: {e}", entry.name))?;
    let copies = args
        .rounds
        .map(|n| round_robin_copies(args.slots, &demands, &positions, n));
    if args.json {
        return Ok(
            serde_json::json!({ "positions": positions, "copies": copies }).to_string() + "\n",
        );
    }
    let mut out = format!(
        "{} in {} slots, {} vGPUs: start slot (0-indexed) per vGPU\n",
        entry.name,
        args.slots,
        demands.len()
    );
    for (i, (d, p)) in demands.iter().zip(&positions).enumerate() {
        out += &format!(
            "vGPU {i}: slots {p}..{} ({} slots)\n",
            p + d.slots - 1,
            d.slots
        );
    }
    out += &format!(
        "shared slots: {}\n",
        shared_slots(args.slots, &demands, &positions)
    );
    if let (Some(n), Some(c)) = (args.rounds, copies) {
        out += &format!("slot copies in {n} round-robin rounds: {c}\n");
    }
    Ok(out)
}
