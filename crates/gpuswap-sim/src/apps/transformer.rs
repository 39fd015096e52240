//! The decoder-only transformers `train-step` and `decode-step` are sized from: public
//! model shapes, their parameter counts, and how their matrix arithmetic counts as
//! instructions. Kept apart so that both apps read one table.
//!
//! **Shapes.** From the models' published configurations (Hugging Face `config.json`):
//! GPT-2 (`gpt2`: `n_layer` 12, `n_embd` 768, `n_head` 12, `vocab_size` 50257,
//! `n_positions` 1024) and GPT-2 XL (`gpt2-xl`: 48, 1600, 25, 50257, 1024), Radford et
//! al. 2019; OPT-1.3B (`facebook/opt-1.3b`: `num_hidden_layers` 24, `hidden_size` 2048,
//! `num_attention_heads` 32, `ffn_dim` 8192, `vocab_size` 50272,
//! `max_position_embeddings` 2048), Zhang et al. 2022, table 1. All three have a 4 x
//! d_model MLP, learned positions and an output head tied to the token embedding.
//!
//! **Parameters.** A layer has `12 d^2 + 13 d`: the Q, K, V and output projections
//! (`4 d^2 + 4 d`), the MLP (`8 d^2 + 5 d`) and two layer norms (`4 d`); the model adds
//! the token and position embeddings and a final layer norm. That gives GPT-2's
//! 124 439 808 exactly as Hugging Face counts it, GPT-2 XL's 1 557 611 200 and
//! OPT-1.3B's 1 315 758 080 within a few thousand (OPT's position table has two rows
//! more, which are left out).
//!
//! **Instructions.** The presets' `ops_per_s` counts the FP32 cores (`matmul`'s notes),
//! but fp16 matrix products run on the tensor cores. A multiply-add of a product counts
//! `1 / TENSOR_FMA_PER_INSTRUCTION` of an instruction: the H100 SXM's (and the H200's,
//! the same chip) 989.4 dense FP16/BF16 tensor TFLOPS over its 66.9 FP32 TFLOPS
//! (NVIDIA's H100 datasheet), 14.8. The peak is assumed, as the timing model does
//! everywhere: real steps reach about half of it.

use crate::program::{Access, Kernel, Op};

/// A decoder-only transformer's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The name sizes use.
    pub name: &'static str,
    /// Transformer layers.
    pub layers: u64,
    /// The model width.
    pub d_model: u64,
    /// Tokens of the vocabulary.
    pub vocab: u64,
    /// Positions of the learned position table: the longest sequence.
    pub positions: u64,
}

/// The models sizes may name, smallest first.
pub(crate) const MODELS: [Shape; 3] = [
    Shape {
        name: "gpt2",
        layers: 12,
        d_model: 768,
        vocab: 50257,
        positions: 1024,
    },
    Shape {
        name: "opt-1.3b",
        layers: 24,
        d_model: 2048,
        vocab: 50272,
        positions: 2048,
    },
    Shape {
        name: "gpt2-xl",
        layers: 48,
        d_model: 1600,
        vocab: 50257,
        positions: 1024,
    },
];

/// Bytes of an fp16 value: weights, gradients, activations and the KV cache.
pub(crate) const HALF_BYTES: u64 = 2;

/// Multiply-adds on the tensor cores per FP32-core instruction (see the module notes).
const TENSOR_FMA_PER_INSTRUCTION: f64 = 989.4 / 66.9;

/// The model named `name`.
pub(crate) fn model(name: &str) -> Result<Shape, String> {
    MODELS.into_iter().find(|m| m.name == name).ok_or_else(|| {
        let names: Vec<_> = MODELS.iter().map(|m| m.name).collect();
        format!("unknown model {name:?}: one of {}", names.join(", "))
    })
}

/// The named sizes of an app sized by a model: `default` (`default`'s) and each model's
/// name, with the app's input for each (`of`).
pub(crate) fn named_sizes<T>(default: Shape, of: impl Fn(Shape) -> T) -> Vec<(&'static str, T)> {
    std::iter::once(("default", of(default)))
        .chain(MODELS.map(|m| (m.name, of(m))))
        .collect()
}

/// A launch of a kernel that runs no phases (as every transformer kernel).
pub(crate) fn launch(name: &str, ops: u64, accesses: Vec<Access>) -> Op {
    Op::Launch(Kernel {
        name: name.into(),
        ops,
        accesses,
        phases: Vec::new(),
        outer_loop: Default::default(),
    })
}

/// The comma-separated `key=value` pairs of a size, each checked to be one.
pub(crate) fn pairs(text: &str) -> Result<Vec<(&str, &str)>, String> {
    text.split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim(), value.trim()))
                .ok_or_else(|| format!("{pair:?} is not a size or a key=value pair"))
        })
        .collect()
}

/// A whole number of at least 1 and at most `max` given for `key`.
pub(crate) fn count(key: &str, value: &str, max: u64) -> Result<u64, String> {
    value
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("{key}: expected a whole number from 1 to {max}, got {value:?}"))
}

impl Shape {
    /// Parameters of one layer.
    pub fn layer_params(self) -> u64 {
        12 * self.d_model * self.d_model + 13 * self.d_model
    }

    /// Parameters outside the layers: the embeddings (the tied output head) and the
    /// final layer norm.
    pub fn embedding_params(self) -> u64 {
        (self.vocab + self.positions + 2) * self.d_model
    }

    /// Every parameter.
    pub fn params(self) -> u64 {
        self.layers * self.layer_params() + self.embedding_params()
    }

    /// Bytes of the KV cache per token: a key and a value of `d_model` fp16 values in
    /// every layer.
    pub fn kv_bytes_per_token(self) -> u64 {
        self.layers * 2 * self.d_model * HALF_BYTES
    }

    /// Multiply-adds of one layer for one token attending to `context` tokens: its
    /// weights' products (`12 d^2`), and the scores and the weighted sum of values
    /// (`d` each per context token).
    pub fn layer_fma(self, context: u64) -> u64 {
        12 * self.d_model * self.d_model + 2 * context * self.d_model
    }

    /// Multiply-adds of the output head for one token: its logits over the vocabulary.
    pub fn head_fma(self) -> u64 {
        self.vocab * self.d_model
    }
}

/// Instructions `fma` tensor-core multiply-adds count as.
pub(crate) fn tensor_ops(fma: u64) -> u64 {
    (fma as f64 / TENSOR_FMA_PER_INSTRUCTION).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_are_the_published_ones() {
        let [gpt2, opt, xl] = MODELS;
        assert_eq!(gpt2.params(), 124_439_808);
        assert_eq!(xl.params(), 1_557_611_200);
        assert!(
            opt.params().abs_diff(1_315_758_080) < 10_000,
            "{}",
            opt.params()
        );
        // OPT-1.3B's KV cache: 24 layers x 2 x 2048 x 2 bytes, 192 KiB a token.
        assert_eq!(opt.kv_bytes_per_token(), 192 << 10);
    }

    #[test]
    fn sizes_name_models_and_counts() {
        assert_eq!(model("opt-1.3b").unwrap().layers, 24);
        assert!(
            model("llama")
                .unwrap_err()
                .contains("gpt2, opt-1.3b, gpt2-xl")
        );
        assert_eq!(pairs("a=1, b = x").unwrap(), [("a", "1"), ("b", "x")]);
        assert!(pairs("a=1,b").unwrap_err().contains("\"b\" is not a size"));
        assert_eq!(count("seq", "512", 1024), Ok(512));
        assert!(count("seq", "0", 1024).unwrap_err().contains("1 to 1024"));
    }
}
