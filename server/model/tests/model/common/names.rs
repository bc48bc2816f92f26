//! Tensor names of the two checkpoint layouts, one table for both
//! directions: Hugging Face (`model.layers.N.self_attn.q_proj.weight`) and
//! GGUF (`blk.N.attn_q.weight`).

/// Whole-model tensors: (Hugging Face, GGUF).
const GLOBAL: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// Per-layer tensors: (Hugging Face, GGUF), without the layer prefix.
const LAYER: [(&str, &str); 12] = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Maps `name` from one layout to the other; `forward` goes Hugging Face →
/// GGUF. Panics on a name the tiny test models never have.
fn translate(name: &str, forward: bool) -> String {
    let pick = |&(hf, gguf): &(&'static str, &'static str)| if forward { (hf, gguf) } else { (gguf, hf) };
    if let Some((_, to)) = GLOBAL.iter().map(pick).find(|(from, _)| *from == name) {
        return to.to_string();
    }
    let (from_prefix, to_prefix) = if forward { ("model.layers.", "blk.") } else { ("blk.", "model.layers.") };
    let rest = name.strip_prefix(from_prefix).unwrap_or_else(|| panic!("unexpected tensor {name}"));
    let (layer, tensor) = rest.split_once('.').unwrap_or_else(|| panic!("unexpected tensor {name}"));
    let (_, to) =
        LAYER.iter().map(pick).find(|(from, _)| *from == tensor).unwrap_or_else(|| panic!("unexpected tensor {name}"));
    format!("{to_prefix}{layer}.{to}")
}

/// The GGUF name of a Hugging Face tensor.
pub fn gguf_name(hf: &str) -> String {
    translate(hf, true)
}

/// The Hugging Face name of a GGUF tensor.
pub fn hf_name(gguf: &str) -> String {
    translate(gguf, false)
}
