//! `train-step`: training steps of a decoder-only transformer (GPT-2 or OPT shapes,
//! [`super::transformer`]) in mixed precision with Adam, as PyTorch runs them: each
//! step's forward, backward and optimizer pass touch the weights, gradients, optimizer
//! state and activations, all of them; an optional cold table beside them is touched
//! only when it is loaded, so that the allocations exceed what a step touches.
//!
//! **Memory.** Mixed-precision Adam keeps 16 bytes per parameter (Rajbhandari et al.
//! 2020, ZeRO, section 3.1): fp16 weights (2) and gradients (2), and fp32 master
//! weights, momentum and variance (12, the buffer `optimizer_state`). Activations kept
//! for the backward pass: `34 s b d` bytes per layer for `s` tokens of `b` sequences
//! (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
//! Models", section 4.1, without its `5 a s^2 b` of attention scores, which
//! FlashAttention does not keep: PyTorch's `scaled_dot_product_attention` on Hopper).
//! The logits of the `b s` tokens in fp32 (`logits`: the loss runs in float32 under
//! autocast). The cold table (`cold_table`, the `cold` key): a frozen embedding table or
//! a replay buffer the step does not touch, loaded from the host at setup; its size is
//! the scenario's to choose (the benchmark: 12 GiB).
//!
//! **A step** launches, in order: `layer_forward` per layer (reads the layer's weights
//! once, writes its activations), `head_forward` (the tied output head reads the token
//! embedding and writes the logits), `head_backward` (reads the logits and the embedding,
//! writes the embedding's gradient), `layer_backward` per layer from the last (reads its
//! weights and activations, writes its gradients), and `adam` (PyTorch's fused Adam: reads
//! the gradients and the optimizer state, writes the state and the fp16 weights). The
//! activations' gradients passed between layers (`2 s b d` bytes a layer) and the input
//! tokens (8 bytes each) are left out: a few MiB against GiB. No `Sync` in a step: a
//! training loop only queues launches unless it reads the loss (which loops do every
//! few steps for logging); the phase's closing `Sync` waits for the last step. A repeat
//! is `steps` steps (1 by default): a notebook cell that trains for a while, with the
//! tenant's `idle_between` between cells.
//!
//! **Compute.** The forward pass is a multiply-add per weight per token and the
//! attention's `2 x context x d` per token and layer (causal: the mean context is half
//! the sequence); the backward pass twice the forward's (Kaplan et al. 2020, the `6N`
//! of a step's `2N + 4N` flops per token), all on the tensor cores
//! ([`super::transformer`]). Adam: 20 instructions per parameter (its two moment
//! updates, a square root and a division of about 10, the bias corrections and the
//! fp16 copy), our estimate; it is memory bound whatever the figure.

use super::common::{h2d, parse_size, phased, size_error};
use super::model::{AppModel, SizeError};
use super::transformer::{
    HALF_BYTES, MODELS, Shape, count, launch, model, named_sizes, pairs, tensor_ops,
};
use crate::device::DeviceShape;
use crate::program::{Access, AccessOrder, Distribution, Op, Program, Slot, WeightedRange};
use gpuswap_units::parse_bytes;

/// The train-step app.
pub struct TrainStep;

const HELP: &str = "default (gpt2, 1 sequence of 1024 tokens, no cold table), a model \
                    (gpt2, opt-1.3b, gpt2-xl), or comma-separated key=value pairs: \
                    model=NAME, batch=SEQUENCES per step (1 to 1024), seq=TOKENS per \
                    sequence (1 to the model's positions), steps=STEPS a repeat (1 to \
                    100000), cold=SIZE of a table the steps do not touch (B, KiB, MiB, GiB)";
/// fp32 master weights, momentum and variance: bytes per parameter.
const OPTIMIZER_BYTES_PER_PARAM: u64 = 12;
/// Activation bytes per token and model width kept per layer (Korthikanti et al.).
const ACTIVATION_BYTES_PER_TOKEN_WIDTH: u64 = 34;
/// A logit in float32.
const LOGIT_BYTES: u64 = 4;
/// The backward pass's multiply-adds per forward one.
const BACKWARD_PER_FORWARD: u64 = 2;
/// Adam's instructions per parameter: our estimate.
const ADAM_OPS_PER_PARAM: u64 = 20;
/// Most sequences per step.
const MAX_BATCH: u64 = 1024;
/// Most steps a repeat.
const MAX_STEPS: u64 = 100_000;

impl AppModel for TrainStep {
    fn name(&self) -> &'static str {
        "train-step"
    }

    fn description(&self) -> &'static str {
        "Mixed-precision Adam training steps of a GPT-2 or OPT-shaped transformer: weights, gradients, optimizer state and activations touched every step, an optional cold table never"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        Ok(program(&parse(size)?, repeat))
    }
}

/// What a step trains.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Input {
    model: Shape,
    /// Sequences per step.
    batch: u64,
    /// Tokens per sequence.
    seq: u64,
    /// Steps a repeat: a notebook cell's, say.
    steps: u64,
    /// The cold table's bytes (none when 0).
    cold_bytes: u64,
}

impl Input {
    /// The default of a model: one sequence as long as it takes.
    fn of(model: Shape) -> Self {
        Self {
            model,
            batch: 1,
            steps: 1,
            seq: model.positions,
            cold_bytes: 0,
        }
    }

    fn tokens(&self) -> u64 {
        self.batch * self.seq
    }

    /// Activation bytes one layer keeps.
    fn activation_bytes_per_layer(&self) -> u64 {
        ACTIVATION_BYTES_PER_TOKEN_WIDTH * self.tokens() * self.model.d_model
    }
}

fn parse(size: &str) -> Result<Input, SizeError> {
    let err = |problem: String| size_error("train-step", HELP, problem);
    let text = size.trim();
    if !text.contains('=') {
        let named = named_sizes(MODELS[0], Input::of);
        return parse_size("train-step", HELP, text, &named, |_| {
            Err("a number is not a model".into())
        });
    }
    let mut input = Input::of(MODELS[0]);
    let mut seq = None;
    for (key, value) in pairs(text).map_err(err)? {
        match key {
            "model" => input.model = model(value).map_err(err)?,
            "batch" => input.batch = count(key, value, MAX_BATCH).map_err(err)?,
            "steps" => input.steps = count(key, value, MAX_STEPS).map_err(err)?,
            "seq" => seq = Some(value),
            "cold" => {
                input.cold_bytes = parse_bytes(value).map_err(|e| err(format!("cold: {e}")))?
            }
            _ => return Err(err(format!("unknown key {key:?}"))),
        }
    }
    input.seq = match seq {
        Some(value) => count("seq", value, input.model.positions).map_err(err)?,
        None => input.model.positions,
    };
    Ok(input)
}

/// An access to `bytes` at `offset_bytes` of a buffer, in address order.
fn range(slot: Slot, offset_bytes: u64, bytes: u64, read: bool, write: bool) -> Access {
    Access {
        slot,
        read_bytes: if read { bytes } else { 0 },
        reread_bytes: 0,
        write_bytes: if write { bytes } else { 0 },
        rewrite_bytes: 0,
        distribution: Distribution::Ranges(vec![WeightedRange {
            offset_bytes,
            bytes,
            weight: 1.0,
        }]),
        order: AccessOrder::Linear,
    }
}

fn program(input: &Input, repeat: u32) -> Program {
    let m = input.model;
    let params = m.params();
    let mut p = Program::default();
    let weights = p.buffer("weights", params * HALF_BYTES);
    let grads = p.buffer("grads", params * HALF_BYTES);
    let state = p.buffer("optimizer_state", params * OPTIMIZER_BYTES_PER_PARAM);
    let act_layer = input.activation_bytes_per_layer();
    let activations = p.buffer("activations", m.layers * act_layer);
    let logits_bytes = input.tokens() * m.vocab * LOGIT_BYTES;
    let logits = p.buffer("logits", logits_bytes);
    let cold = (input.cold_bytes > 0).then(|| p.buffer("cold_table", input.cold_bytes));

    // The embedding comes first in the weights and their gradients, then the layers.
    let embedding_bytes = m.embedding_params() * HALF_BYTES;
    let layer_bytes = m.layer_params() * HALF_BYTES;
    let layer_at = |l: u64| embedding_bytes + l * layer_bytes;
    // Causal attention: the mean context is half the sequence.
    let layer_ops = tensor_ops(input.tokens() * m.layer_fma(input.seq / 2));
    let head_ops = tensor_ops(input.tokens() * m.head_fma());
    let mut step = Vec::new();
    for l in 0..m.layers {
        step.push(launch(
            "layer_forward",
            layer_ops,
            vec![
                range(weights, layer_at(l), layer_bytes, true, false),
                range(activations, l * act_layer, act_layer, false, true),
            ],
        ));
    }
    step.push(launch(
        "head_forward",
        head_ops,
        vec![
            range(weights, 0, embedding_bytes, true, false),
            range(logits, 0, logits_bytes, false, true),
        ],
    ));
    step.push(launch(
        "head_backward",
        BACKWARD_PER_FORWARD * head_ops,
        vec![
            range(logits, 0, logits_bytes, true, false),
            range(weights, 0, embedding_bytes, true, false),
            range(grads, 0, embedding_bytes, false, true),
        ],
    ));
    for l in (0..m.layers).rev() {
        step.push(launch(
            "layer_backward",
            BACKWARD_PER_FORWARD * layer_ops,
            vec![
                range(weights, layer_at(l), layer_bytes, true, false),
                range(activations, l * act_layer, act_layer, true, false),
                range(grads, layer_at(l), layer_bytes, false, true),
            ],
        ));
    }
    let all = |slot, bytes, read, write| range(slot, 0, bytes, read, write);
    step.push(launch(
        "adam",
        ADAM_OPS_PER_PARAM * params,
        vec![
            all(grads, params * HALF_BYTES, true, false),
            all(state, params * OPTIMIZER_BYTES_PER_PARAM, true, true),
            all(weights, params * HALF_BYTES, false, true),
        ],
    ));

    let mut slots = vec![weights, grads, state, activations, logits];
    slots.extend(cold);
    let mut setup: Vec<Op> = slots.iter().copied().map(Op::Alloc).collect();
    // The checkpoint's weights and the cold table come from the host; the optimizer's
    // zeros are filled on the GPU, a fill the models leave out.
    setup.push(h2d(weights, params * HALF_BYTES));
    if let Some(cold) = cold {
        setup.push(h2d(cold, input.cold_bytes));
    }
    let teardown = slots.into_iter().map(Op::Free).collect();
    let body = vec![Op::Repeat {
        times: input.steps as u32,
        body: step,
    }];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, phase_body, rejects, traffic};

    const GIB: u64 = 1 << 30;

    #[test]
    fn holds_sixteen_bytes_a_parameter_activations_logits_and_the_cold_table() {
        let p = check_app(&TrainStep, "model=opt-1.3b,batch=1,seq=2048,cold=12GiB");
        let params = 1_315_753_984;
        let bytes: Vec<_> = p
            .buffers
            .iter()
            .map(|b| (b.label.as_str(), b.bytes))
            .collect();
        assert_eq!(
            bytes,
            [
                ("weights", 2 * params),
                ("grads", 2 * params),
                ("optimizer_state", 12 * params),
                // 34 bytes per token and width, 24 layers.
                ("activations", 24 * 34 * 2048 * 2048),
                ("logits", 2048 * 50272 * 4),
                ("cold_table", 12 * GIB),
            ]
        );
        // 19.6 GiB of model and optimizer, 3.2 GiB of activations, 0.4 GiB of logits.
        let hot = p.peak_allocated_bytes() - 12 * GIB;
        assert!((23 * GIB..24 * GIB).contains(&hot), "{hot}");
        assert_eq!(
            check_app(&TrainStep, "default"),
            check_app(&TrainStep, "gpt2")
        );
        assert_eq!(check_app(&TrainStep, "default").buffers.len(), 5);
    }

    #[test]
    fn a_step_touches_every_hot_byte_and_never_the_cold_table() {
        let p = TrainStep
            .program("model=gpt2,batch=2,seq=512,cold=1GiB", 10, gtx480())
            .unwrap();
        let body = phase_body(&p, 10);
        // A forward and a backward kernel per layer, the head's two and Adam.
        assert_eq!(launches(body), 12 * 2 + 2 + 1);
        let cell = TrainStep.program("steps=50", 1, gtx480()).unwrap();
        assert_eq!(launches(phase_body(&cell, 1)), 50 * (12 * 2 + 2 + 1));
        let t = traffic(body, p.buffers.len());
        let b: Vec<_> = p.buffers.iter().map(|b| b.bytes).collect();
        // Weights: read forward and backward (the embedding by the head, twice), then
        // written by Adam.
        assert_eq!(t[0], (2 * b[0], b[0]));
        // Gradients written once and read by Adam; the optimizer state read and written.
        assert_eq!(t[1], (b[1], b[1]));
        assert_eq!(t[2], (b[2], b[2]));
        // Activations written forward, read backward; the logits written and read.
        assert_eq!(t[3], (b[3], b[3]));
        assert_eq!(t[4], (b[4], b[4]));
        assert_eq!(t[5], (0, 0), "the cold table is not touched by a step");
        // It is loaded once, with the weights, before the phase.
        let copied: Vec<_> = p
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Copy { slot, bytes, .. } => Some((*slot, *bytes)),
                _ => None,
            })
            .collect();
        assert_eq!(copied, [(0, b[0]), (5, 1 << 30)]);
    }

    #[test]
    fn a_step_computes_six_multiply_adds_per_parameter_and_token_on_the_tensor_cores() {
        let p = TrainStep
            .program("model=opt-1.3b,seq=2048", 1, gtx480())
            .unwrap();
        let Op::Repeat { body: step, .. } = &phase_body(&p, 1)[0] else {
            panic!("a repeat is steps");
        };
        let matrix_ops: u64 = step
            .iter()
            .filter_map(|op| match op {
                Op::Launch(k) if k.name != "adam" => Some(k.ops),
                _ => None,
            })
            .sum();
        // 3 multiply-adds (6 flops) per weight per token, plus attention; over 14.8.
        let weight_fma = 3.0 * 2048.0 * (24.0 * 12.0 * 2048.0 * 2048.0 + 50272.0 * 2048.0);
        let ratio = matrix_ops as f64 * 989.4 / 66.9 / weight_fma;
        assert!((1.0..1.1).contains(&ratio), "{ratio}");
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&TrainStep, "llama", "not a size");
        rejects(&TrainStep, "7", "not a model");
        rejects(&TrainStep, "model=llama", "unknown model");
        rejects(&TrainStep, "model=gpt2,seq=1025", "1 to 1024");
        rejects(&TrainStep, "batch=0", "1 to 1024");
        rejects(&TrainStep, "steps=100001", "1 to 100000");
        rejects(&TrainStep, "cold=12", "cold");
        rejects(&TrainStep, "depth=3", "unknown key");
        rejects(
            &TrainStep,
            "model=gpt2,batch",
            "not a size or a key=value pair",
        );
    }
}
