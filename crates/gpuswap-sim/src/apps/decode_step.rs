//! `decode-step`: an inference server decoding with a decoder-only transformer (OPT-1.3B
//! by default, [`super::transformer`]) and a preallocated KV cache, as vLLM serves one:
//! each generated token reads every weight and the KV cache of the live sequences.
//!
//! **Memory.** The fp16 weights (`weights`, 2 bytes a parameter) and the KV cache
//! (`kv_cache`): a key and a value of `d_model` fp16 values per layer and token, 192 KiB
//! a token for OPT-1.3B. vLLM allocates the cache once at start-up (its
//! `gpu_memory_utilization` share of the GPU) and hands out blocks of it; the `kv` key
//! sets its size, by default just what the live sequences fill. The live sequences use
//! its first bytes; the rest is held and untouched, as an idle server's whole cache is.
//! The logits (`seqs x vocab` floats, a few MiB) and the token ids are left out.
//!
//! **A repeat** is a burst of requests: `rounds` rounds, each of which waits `gap` on the
//! host (requests arriving), then serves `seqs` sequences together (vLLM's continuous
//! batching, simplified to rounds that start and end together): a `prefill` kernel over
//! their prompts of `prompt` tokens (reads every weight once, writes the prompts' keys
//! and values), then `tokens` `decode` kernels, one per generated token (reads every
//! weight once and the live sequences' KV cache, at the mean context of the decode,
//! `prompt + tokens / 2`; writes each sequence's new key and value), then a `Sync`, the
//! server returning the answers. One kernel stands for a step's launches: vLLM captures
//! a decode step in a CUDA graph, launched as one. The tenant's `idle_between` puts idle
//! time between bursts.
//!
//! **Compute.** Per token a multiply-add per weight and the attention's `2 x context x
//! d` per layer (a prompt's mean causal context is half of it); the output head only for
//! a sequence's last prompt token and each generated one. On the tensor cores
//! ([`super::transformer`]). A decode step at a few sequences is memory bound: OPT-1.3B's
//! 2.6 GB of weights take 0.55 ms at the H200's 4.8 TB/s.

use super::common::{data_access, h2d, parse_size, phased, size_error};
use super::model::{AppModel, SizeError};
use super::transformer::{
    HALF_BYTES, MODELS, Shape, count, launch, model, named_sizes, pairs, tensor_ops,
};
use crate::device::DeviceShape;
use crate::program::{AccessOrder, Op, Program};
use gpuswap_units::{parse_bytes, parse_ns};

/// The decode-step app.
pub struct DecodeStep;

const HELP: &str = "default (opt-1.3b, 6 rounds a burst of 8 sequences, 512 prompt and 128 \
                    generated tokens each, 100 ms apart, a cache they fill), a model (gpt2, \
                    opt-1.3b, gpt2-xl), or comma-separated key=value pairs: model=NAME, \
                    seqs=SEQUENCES a round (1 to 1024), prompt=TOKENS, tokens=TOKENS \
                    generated (prompt + tokens at most the model's positions), \
                    rounds=ROUNDS a burst (1 to 10000), gap=DURATION before each round, \
                    kv=SIZE of the preallocated KV cache (at least what the live sequences \
                    fill)";
/// The model of the default: the server of about 1.3 B parameters.
const DEFAULT_MODEL: Shape = MODELS[1];
/// Most sequences a round.
const MAX_SEQS: u64 = 1024;
/// Most rounds a burst.
const MAX_ROUNDS: u64 = 10_000;

impl AppModel for DecodeStep {
    fn name(&self) -> &'static str {
        "decode-step"
    }

    fn description(&self) -> &'static str {
        "An inference server decoding with a GPT-2 or OPT-shaped transformer: every token reads all weights and the live sequences' part of a preallocated KV cache"
    }

    fn sizes_help(&self) -> &'static str {
        HELP
    }

    fn program(&self, size: &str, repeat: u32, _device: DeviceShape) -> Result<Program, SizeError> {
        Ok(program(&parse(size)?, repeat))
    }
}

/// What the server decodes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Input {
    model: Shape,
    /// Sequences a round.
    seqs: u64,
    /// Prompt tokens a sequence.
    prompt: u64,
    /// Generated tokens a sequence.
    tokens: u64,
    /// Rounds a burst.
    rounds: u64,
    /// Host time before each round.
    gap_ns: u64,
    /// The KV cache's bytes; `None`: what the live sequences fill.
    kv_bytes: Option<u64>,
}

impl Input {
    /// The default of a model.
    fn of(model: Shape) -> Self {
        Self {
            model,
            seqs: 8,
            prompt: 512,
            tokens: 128,
            rounds: 6,
            gap_ns: 100_000_000,
            kv_bytes: None,
        }
    }

    /// KV cache bytes the live sequences fill.
    fn live_kv_bytes(&self) -> u64 {
        self.seqs * (self.prompt + self.tokens) * self.model.kv_bytes_per_token()
    }
}

fn parse(size: &str) -> Result<Input, SizeError> {
    let err = |problem: String| size_error("decode-step", HELP, problem);
    let text = size.trim();
    if !text.contains('=') {
        let named = named_sizes(DEFAULT_MODEL, Input::of);
        return parse_size("decode-step", HELP, text, &named, |_| {
            Err("a number is not a model".into())
        });
    }
    let mut input = Input::of(DEFAULT_MODEL);
    // The model's positions bound prompt + tokens below, once the model is known.
    let positions = u64::from(u32::MAX);
    for (key, value) in pairs(text).map_err(err)? {
        match key {
            "model" => input.model = model(value).map_err(err)?,
            "seqs" => input.seqs = count(key, value, MAX_SEQS).map_err(err)?,
            "prompt" => input.prompt = count(key, value, positions).map_err(err)?,
            "tokens" => input.tokens = count(key, value, positions).map_err(err)?,
            "rounds" => input.rounds = count(key, value, MAX_ROUNDS).map_err(err)?,
            "gap" => input.gap_ns = parse_ns(value).map_err(|e| err(format!("gap: {e}")))?,
            "kv" => {
                input.kv_bytes = Some(parse_bytes(value).map_err(|e| err(format!("kv: {e}")))?);
            }
            _ => return Err(err(format!("unknown key {key:?}"))),
        }
    }
    if input.prompt + input.tokens > input.model.positions {
        return Err(err(format!(
            "prompt + tokens is {}, more than {}'s {} positions",
            input.prompt + input.tokens,
            input.model.name,
            input.model.positions
        )));
    }
    if input.kv_bytes.is_some_and(|kv| kv < input.live_kv_bytes()) {
        return Err(err(format!(
            "kv holds less than the {} B the live sequences fill",
            input.live_kv_bytes()
        )));
    }
    Ok(input)
}

fn program(input: &Input, repeat: u32) -> Program {
    let m = input.model;
    let weights_bytes = m.params() * HALF_BYTES;
    let live = input.live_kv_bytes();
    let per_token = m.kv_bytes_per_token();
    let mut p = Program::default();
    let weights = p.buffer("weights", weights_bytes);
    let kv = p.buffer("kv_cache", input.kv_bytes.unwrap_or(live));
    // Each kernel touches the weights and the live part of the cache in address order.
    let linear =
        |slot, bytes, read, write| data_access(slot, bytes, read, write, AccessOrder::Linear);
    let prompt_tokens = input.seqs * input.prompt;
    let prefill = launch(
        "prefill",
        tensor_ops(
            prompt_tokens * m.layers * m.layer_fma(input.prompt / 2) + input.seqs * m.head_fma(),
        ),
        vec![
            linear(weights, weights_bytes, weights_bytes, 0),
            linear(kv, live, 0, prompt_tokens * per_token),
        ],
    );
    let context = input.prompt + input.tokens / 2;
    let decode = launch(
        "decode",
        tensor_ops(input.seqs * (m.layers * m.layer_fma(context) + m.head_fma())),
        vec![
            linear(weights, weights_bytes, weights_bytes, 0),
            linear(
                kv,
                live,
                input.seqs * context * per_token,
                input.seqs * per_token,
            ),
        ],
    );
    let round = vec![
        Op::Cpu { ns: input.gap_ns },
        prefill,
        Op::Repeat {
            times: input.tokens as u32,
            body: vec![decode],
        },
        Op::Sync,
    ];
    let body = vec![Op::Repeat {
        times: input.rounds as u32,
        body: round,
    }];
    let setup = vec![
        Op::Alloc(weights),
        Op::Alloc(kv),
        // The checkpoint's weights come from the host; the cache is written by prefills.
        h2d(weights, weights_bytes),
    ];
    let teardown = vec![Op::Free(weights), Op::Free(kv)];
    p.ops = phased(setup, repeat, body, teardown);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::testing::{check_app, gtx480, launches, phase_body, rejects, traffic};
    use crate::program::Distribution;

    #[test]
    fn holds_the_fp16_weights_and_the_kv_cache() {
        let p = check_app(&DecodeStep, "default");
        let kv_token = 24 * 2 * 2048 * 2;
        let bytes: Vec<_> = p
            .buffers
            .iter()
            .map(|b| (b.label.as_str(), b.bytes))
            .collect();
        assert_eq!(
            bytes,
            [
                ("weights", 2 * 1_315_753_984),
                ("kv_cache", 8 * (512 + 128) * kv_token)
            ]
        );
        let preallocated = check_app(&DecodeStep, "kv=8GiB");
        assert_eq!(preallocated.buffers[1].bytes, 8 << 30);
        assert_eq!(check_app(&DecodeStep, "opt-1.3b"), p);
    }

    #[test]
    fn each_token_reads_every_weight_and_the_live_kv_cache() {
        let p = DecodeStep
            .program(
                "seqs=4,prompt=256,tokens=64,rounds=3,gap=50ms,kv=4GiB",
                2,
                gtx480(),
            )
            .unwrap();
        let body = phase_body(&p, 2);
        // Per round a prefill and a decode per token.
        assert_eq!(launches(body), 3 * (1 + 64));
        let t = traffic(body, 2);
        let weights = 2 * 1_315_753_984u64;
        assert_eq!(t[0], (3 * 65 * weights, 0));
        let kv_token = 192 << 10;
        // Decodes read the 4 sequences' mean context of 256 + 32 tokens.
        assert_eq!(t[1].0, 3 * 64 * 4 * 288 * kv_token);
        // Prompts and generated tokens are written once each.
        assert_eq!(t[1].1, 3 * 4 * (256 + 64) * kv_token);
        let Op::Repeat { body: round, .. } = &body[0] else {
            panic!("a burst is rounds");
        };
        assert_eq!(round[0], Op::Cpu { ns: 50_000_000 });
        // The cache beyond the live sequences is not touched.
        let Op::Launch(decode) = &round[2..]
            .iter()
            .find_map(|op| match op {
                Op::Repeat { body, .. } => Some(&body[0]),
                _ => None,
            })
            .unwrap()
        else {
            panic!("decodes");
        };
        let Distribution::Ranges(r) = &decode.accesses[1].distribution else {
            panic!("a range");
        };
        assert_eq!(r[0].bytes, 4 * 320 * kv_token);
    }

    #[test]
    fn bad_sizes_are_rejected() {
        rejects(&DecodeStep, "llama", "not a size");
        rejects(
            &DecodeStep,
            "model=gpt2,prompt=1000",
            "more than gpt2's 1024 positions",
        );
        rejects(&DecodeStep, "kv=512MiB", "kv holds less");
        rejects(&DecodeStep, "seqs=0", "1 to 1024");
        rejects(&DecodeStep, "gap=5", "gap");
        rejects(&DecodeStep, "batch=3", "unknown key");
    }
}
