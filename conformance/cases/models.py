"""Models written the way users write them: parameters as a pytree argument, plain jax.numpy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import Tree, arg, case
from conformance.nets import gru, lstm

T = {"float32": (2e-4, 2e-4)}


def _w(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    s = scale if scale is not None else 1.0 / np.sqrt(shape[-2] if len(shape) > 1 else shape[0])
    return (rng.standard_normal(shape) * s).astype(np.float32)


# --- MLP -------------------------------------------------------------------------------
def mlp_params(rng):
    return {"l1": {"w": _w(rng, 16, 32), "b": _w(rng, 32)}, "l2": {"w": _w(rng, 32, 32), "b": _w(rng, 32)},
            "out": {"w": _w(rng, 32, 10), "b": _w(rng, 10)}}


def mlp(params, x):
    for name in ("l1", "l2"):
        x = jax.nn.relu(x @ params[name]["w"] + params[name]["b"])
    return jax.nn.log_softmax(x @ params["out"]["w"] + params["out"]["b"])


case("model.mlp", mlp, Tree(mlp_params), arg("f32[4,16]"), family="model", tags={"model"}, tol=T)


# --- ResNet-style CNN with batch norm (inference) --------------------------------------------
def _conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _bn(x, p):
    return (x - p["mean"]) * lax.rsqrt(p["var"] + 1e-5) * p["scale"] + p["bias"]


def bn_params(rng, c):
    return {"mean": _w(rng, c, scale=0.1), "var": (np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32),
            "scale": (1 + _w(rng, c, scale=0.1)), "bias": _w(rng, c, scale=0.1)}


def resnet_params(rng):
    return {"stem": _w(rng, 3, 3, 3, 8, scale=0.3), "bn0": bn_params(rng, 8),
            "b1": {"c1": _w(rng, 3, 3, 8, 8, scale=0.2), "bn1": bn_params(rng, 8), "c2": _w(rng, 3, 3, 8, 8, scale=0.2),
                   "bn2": bn_params(rng, 8)},
            "down": {"c1": _w(rng, 3, 3, 8, 16, scale=0.2), "bn1": bn_params(rng, 16), "c2": _w(rng, 3, 3, 16, 16, scale=0.2),
                     "bn2": bn_params(rng, 16), "proj": _w(rng, 1, 1, 8, 16, scale=0.3)},
            "head": {"w": _w(rng, 16, 5), "b": _w(rng, 5)}}


def resnet(params, x):
    x = jax.nn.relu(_bn(_conv(x, params["stem"]), params["bn0"]))
    b = params["b1"]
    y = jax.nn.relu(_bn(_conv(x, b["c1"]), b["bn1"]))
    x = jax.nn.relu(x + _bn(_conv(y, b["c2"]), b["bn2"]))
    d = params["down"]
    y = jax.nn.relu(_bn(_conv(x, d["c1"], 2), d["bn1"]))
    x = jax.nn.relu(_conv(x, d["proj"], 2) + _bn(_conv(y, d["c2"]), d["bn2"]))
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return jnp.mean(x, axis=(1, 2)) @ params["head"]["w"] + params["head"]["b"]


case("model.resnet_bn", resnet, Tree(resnet_params), arg("f32[2,16,16,3]"), family="model", tags={"model", "slow"},
     tol={"float32": (1e-3, 1e-3)})


# --- Transformer encoder layer: masked attention, layer norm, GELU ----------------------------
D, H = 16, 4


def encoder_params(rng):
    return {"wq": _w(rng, D, D), "wk": _w(rng, D, D), "wv": _w(rng, D, D), "wo": _w(rng, D, D),
            "ln1": {"g": 1 + _w(rng, D, scale=0.1), "b": _w(rng, D, scale=0.1)},
            "ln2": {"g": 1 + _w(rng, D, scale=0.1), "b": _w(rng, D, scale=0.1)},
            "ff1": {"w": _w(rng, D, 4 * D), "b": _w(rng, 4 * D)}, "ff2": {"w": _w(rng, 4 * D, D), "b": _w(rng, D)}}


def layer_norm(x, p, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * p["g"] + p["b"]


def attention(p, x, mask):
    b, t, _ = x.shape
    split = lambda y: y.reshape(b, -1, H, D // H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(x @ p["wq"]), split(x @ p["wk"]), split(x @ p["wv"])
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(D // H)
    logits = jnp.where(mask[:, None, None, :], logits, -1e9)
    out = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(logits, axis=-1), v)
    return out.transpose(0, 2, 1, 3).reshape(b, t, D) @ p["wo"]


def encoder_layer(params, x, lengths):
    mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
    x = x + attention(params, layer_norm(x, params["ln1"]), mask)
    h = jax.nn.gelu(layer_norm(x, params["ln2"]) @ params["ff1"]["w"] + params["ff1"]["b"])
    return x + h @ params["ff2"]["w"] + params["ff2"]["b"]


case("model.transformer_encoder", encoder_layer, Tree(encoder_params), arg("f32[2,6,16]"),
     arg("i32[2]", "values", values=(6, 3)), family="model", tags={"model"}, tol={"float32": (1e-3, 1e-4)})


# --- Decoder step with a KV-cache update (dynamic_update_slice) --------------------------------
def decoder_step(params, x, k_cache, v_cache, pos):
    q, k, v = x @ params["wq"], x @ params["wk"], x @ params["wv"]
    k_cache = lax.dynamic_update_slice(k_cache, k[:, None, :], (0, pos, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v[:, None, :], (0, pos, 0))
    logits = jnp.einsum("bd,btd->bt", q, k_cache) / np.sqrt(D)
    logits = jnp.where(jnp.arange(k_cache.shape[1])[None, :] <= pos, logits, -jnp.inf)
    out = jnp.einsum("bt,btd->bd", jax.nn.softmax(logits, axis=-1), v_cache) @ params["wo"]
    return out, k_cache, v_cache


case("model.decoder_kv_cache", decoder_step, Tree(encoder_params), arg("f32[2,16]"), arg("f32[2,8,16]"), arg("f32[2,8,16]"),
     arg("i32[]", "values", values=(3,)), family="model", tags={"model"}, tol={"float32": (1e-3, 1e-4)})


# --- LSTM and GRU via lax.scan --------------------------------------------------------------
def lstm_params(rng):
    return {"wx": _w(rng, 6, 32), "wh": _w(rng, 8, 32), "b": _w(rng, 32), "out": _w(rng, 8, 3)}


case("model.lstm_scan", lstm, Tree(lstm_params), arg("f32[7,2,6]"), family="model", tags={"model"}, tol=T)


def gru_params(rng):
    return {"wx": _w(rng, 5, 24), "wh": _w(rng, 8, 16), "whn": _w(rng, 8, 8), "b": _w(rng, 24)}


case("model.gru_scan", gru, Tree(gru_params), arg("f32[6,3,5]"), arg("f32[3,8]"), family="model", tags={"model"}, tol=T)


# --- A stack of layers as one lax.scan over stacked weights closed over (Flax nn.scan, Haiku layer_stack)
_STACK_RNG = np.random.default_rng(11)
_STACK = {"w": _w(_STACK_RNG, 5, 16, 16), "b": _w(_STACK_RNG, 5, 16, scale=0.1), "g": 1 + _w(_STACK_RNG, 5, 16, scale=0.1)}


def _stacked_layer(x, p):
    h = jax.nn.gelu(x @ p["w"] + p["b"])
    y = x + h * p["g"]
    return y, jnp.mean(y, axis=-1)


case("model.scan_over_layers", lambda x: lax.scan(_stacked_layer, x, _STACK), arg("f32[4,16]"),
     family="model", tags={"model"}, tol=T)


# --- U-Net-style conv + transposed conv --------------------------------------------------------
def unet_params(rng):
    return {"e1": _w(rng, 3, 3, 2, 8, scale=0.3), "e2": _w(rng, 3, 3, 8, 16, scale=0.2), "mid": _w(rng, 3, 3, 16, 16, scale=0.2),
            "up": _w(rng, 2, 2, 16, 8, scale=0.2), "d1": _w(rng, 3, 3, 16, 8, scale=0.2), "out": _w(rng, 1, 1, 8, 1, scale=0.3)}


def unet(params, x):
    e1 = jax.nn.relu(_conv(x, params["e1"]))
    e2 = jax.nn.relu(_conv(lax.reduce_window(e1, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), params["e2"]))
    m = jax.nn.relu(_conv(e2, params["mid"]))
    up = lax.conv_transpose(m, params["up"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    d = jax.nn.relu(_conv(jnp.concatenate([up, e1], axis=-1), params["d1"]))
    return jax.nn.sigmoid(_conv(d, params["out"]))


case("model.unet", unet, Tree(unet_params), arg("f32[1,8,8,2]"), family="model", tags={"model"}, tol={"float32": (1e-3, 1e-4)})


# --- VAE with sampling (jax.random) ---------------------------------------------------------
def vae_params(rng):
    return {"enc": _w(rng, 12, 16), "mu": _w(rng, 16, 4), "logvar": _w(rng, 16, 4), "dec1": _w(rng, 4, 16), "dec2": _w(rng, 16, 12)}


def _vae(params, x, key):
    h = jnp.tanh(x @ params["enc"])
    mu, logvar = h @ params["mu"], h @ params["logvar"]
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)
    recon = jax.nn.sigmoid(jnp.tanh(z @ params["dec1"]) @ params["dec2"])
    kl = -0.5 * jnp.sum(1 + logvar - mu ** 2 - jnp.exp(logvar), axis=-1)
    return recon, kl


case("model.vae_key_input", lambda p, x, k: _vae(p, x, jax.random.wrap_key_data(k)), Tree(vae_params), arg("f32[3,12]"),
     arg("u32[2]", "int", low=0, high=2**31), family="model", tags={"model", "random"}, tol=T)
case("model.vae_fixed_seed", lambda p, x: _vae(p, x, jax.random.key(0)), Tree(vae_params), arg("f32[3,12]"), family="model",
     tags={"model", "random"}, tol=T)


# --- A training step: loss, grad and an SGD update ---------------------------------------------
def train_step(params, x, labels):
    def loss(p):
        logits = mlp(p, x)
        return -jnp.mean(jnp.take_along_axis(logits, labels[:, None], axis=1))

    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree_util.tree_map(lambda w, g: w - 0.1 * g, params, grads)


case("model.mlp_train_step", train_step, Tree(mlp_params), arg("f32[4,16]"), arg("i32[4]", "int", low=0, high=9),
     family="model", tags={"model"}, tol={"float32": (1e-3, 1e-4)})


# --- 1-D conv audio classifier with symbolic time -------------------------------------------------
def audio_params(rng):
    return {"c1": _w(rng, 5, 1, 8, scale=0.3), "c2": _w(rng, 3, 8, 8, scale=0.3), "head": _w(rng, 8, 4)}


def audio(params, wav):
    dn = ("NWC", "WIO", "NWC")
    x = jax.nn.relu(lax.conv_general_dilated(wav[..., None], params["c1"], (2,), "SAME", dimension_numbers=dn))
    x = jax.nn.relu(lax.conv_general_dilated(x, params["c2"], (1,), "SAME", dimension_numbers=dn))
    return jnp.max(x, axis=1) @ params["head"]


case("model.audio_conv1d_symbolic", audio, Tree(audio_params), arg("f32[2,t]"), family="model", tags={"model"},
     sizes=({"t": 16}, {"t": 30}), tol={"float32": (1e-3, 1e-4)})


# --- Mixture-of-experts router with top-k ---------------------------------------------------
def moe_params(rng):
    return {"router": _w(rng, 8, 4), "experts": _w(rng, 4, 8, 8)}


def moe(params, x):
    weights, idx = lax.top_k(jax.nn.softmax(x @ params["router"]), 2)
    expert_out = jnp.einsum("td,edh->teh", x, params["experts"])
    picked = jnp.take_along_axis(expert_out, idx[:, :, None], axis=1)
    return jnp.sum(picked * weights[:, :, None], axis=1)


case("model.moe_topk", moe, Tree(moe_params), arg("f32[5,8]"), family="model", tags={"model"}, tol=T)
