"""A8's lecture-paste sample: lecture 16's code (``dlcourse.lm``, which the lecture shows cell by cell) pasted into
A8's answer cells, as a student who copies the lecture would hand it in: its BPE with its own tie rule and no special
tokens, its tokenizer, its RMSNorm (float32 inside whatever the input), the lecture's ``rotate`` exercise as
``rope``, its attention with one key and value head per query head fitted to the given layers, its AdamW, groups and
cosine schedule, torch's gradient clipping (what its ``train`` calls), its ``train``, sampling and ``generate``, and
its ``lm_loss`` under autocast; nothing where the lecture has nothing (fp16 loss scaling).
It must stay well below a pass: the assignment asks for the lecture's ideas carried one step further, not pasted.

The sample is made from the release, so it follows the assignment; after ``python -m autograder check A8 --update``
rewrite it with ``.venv/bin/python -m tests.assignments.test_a8_lecture_paste``.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import Course, is_solution, nbgrader_meta
from tests.fixtures.lecture_paste import MAIN, SAMPLE, grade_pasted, pasted_notebook, write_samples

AID = "A8"

# answer cell -> lecture 16's code for it, adapted only to the signature; cells not named keep the release's stub
PASTED = {
    "bpe": '''
def split_on_special(text, special_tokens):
    """The pieces of ``text``, each special token a piece of its own (the longest first where two overlap)."""
    if not special_tokens:
        return [text] if text else []
    pattern = "|".join(re.escape(s) for s in sorted(special_tokens, key=len, reverse=True))
    return [piece for piece in re.split(f"({pattern})", text) if piece]


def train_bpe(text, vocab_size, special_tokens=()):
    # lecture 16, section 1: lm.train_bpe, its merges turned into byte strings
    merges = lm.train_bpe(text, vocab_size)
    vocab = lm.BPETokenizer(merges).vocab
    return vocab, [(vocab[a], vocab[b]) for a, b in merges]
''',
    "tokenizer": """
class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=()):
        self.vocab = dict(vocab)
        self.merges = [tuple(pair) for pair in merges]
        self.special_tokens = list(special_tokens)
        # lecture 16, section 1: lm.BPETokenizer, with the merges as pairs of ids
        id_of = {token: i for i, token in sorted(self.vocab.items(), reverse=True)}
        self.lecture = lm.BPETokenizer([(id_of[a], id_of[b]) for a, b in self.merges])

    def encode(self, text):
        return self.lecture.encode(text)

    def decode(self, ids):
        return b"".join(self.vocab[int(i)] for i in ids).decode("utf-8", errors="replace")
""",
    "layers": """
class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        # lecture 16, section 2: lm.RMSNorm
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def rope(x, positions, base=10000.0):
    # lecture 16, exercise 1 (its solution cell): rotate
    d = x.shape[-1]
    angle = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2].double(), x[..., 1::2].double()
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2).to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        # lecture 16, section 2: lm.SwiGLU
        return self.down(F.silu(self.gate(x)) * self.up(x))
""",
    "optim": """
class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        # lecture 16, section 3: lm.AdamW
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                m, v, t = state["m"], state["v"], state["t"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                p.mul_(1 - lr * decay)
                denominator = (v / (1 - beta2**t)).sqrt_().add_(eps)
                p.addcdiv_(m, denominator, value=-lr / (1 - beta1**t))


def parameter_groups(model, weight_decay):
    # lecture 16, section 3: lm.parameter_groups
    no_decay = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding | RMSNorm | nn.LayerNorm):
            no_decay.update(id(p) for p in module.parameters(recurse=False))
        elif getattr(module, "bias", None) is not None:
            no_decay.add(id(module.bias))
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    return [
        {"params": [p for p in params if id(p) not in no_decay], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0},
    ]


def clip_gradients(parameters, max_norm):
    # lecture 16's train clips with torch
    return float(nn.utils.clip_grad_norm_(parameters, max_norm))


def wsd_schedule(step, max_lr, warmup, total, decay_steps, min_lr=0.0):
    # lecture 16, section 3: lm.learning_rate, the warm-up and the cosine
    if step < warmup:
        return max_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
""",
    "model": """
@dataclass(frozen=True)
class Config:
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 1
    max_len: int = 256
    rope_base: float = 10000.0
    hidden: int | None = None

    @property
    def mlp_hidden(self):
        return self.hidden or -(-8 * self.d_model // 3 // 8) * 8


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0):
        super().__init__()
        assert d_model % n_heads == 0 and n_heads % n_kv_heads == 0
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d_model // n_heads
        self.rope_base = rope_base
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * n_kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, positions, cache=None):
        # lecture 16, section 2: lm.Attention, its fused qkv split into the given q and kv
        B, N, D = x.shape
        k, v = self.kv(x).chunk(2, dim=-1)
        q, k, v = (t.reshape(B, N, self.n_heads, -1).transpose(1, 2) for t in (self.q(x), k, v))
        q, k = rope(q, positions, self.rope_base), rope(k, positions, self.rope_base)
        past = 0
        if cache is not None:
            if cache:
                past = cache["k"].shape[2]
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        if past and N > 1:
            mask = torch.ones(N, past + N, dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=N > 1)
        return self.out(y.transpose(1, 2).reshape(B, N, D))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(config.d_model), RMSNorm(config.d_model)
        self.attn = Attention(config.d_model, config.n_heads, config.n_kv_heads, config.rope_base)
        self.mlp = SwiGLU(config.d_model, config.mlp_hidden)

    def forward(self, x, positions, cache=None):
        # lecture 16, section 2: lm.Block
        x = x + self.attn(self.norm1(x), positions, cache)
        return x + self.mlp(self.norm2(x))


class LM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config, self.rope_base = config, config.rope_base
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.embed.weight
        for name, p in self.named_parameters():
            if name.endswith(("attn.out.weight", "mlp.down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * config.n_layers))
            elif name == "embed.weight":
                nn.init.normal_(p, std=config.d_model**-0.5)
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, caches=None, start=0):
        # lecture 16, section 2: lm.LanguageModel, positions from start
        positions = torch.arange(start, start + idx.shape[1])
        x = self.embed(idx)
        for i, block in enumerate(self.blocks):
            x = block(x, positions, None if caches is None else caches[i])
        return self.head(self.norm(x))
""",
    "train": '''
def random_windows(tokens, batch, context, generator):
    """`batch` windows of `context` tokens at random places, and the same shifted by one (the targets)."""
    starts = torch.randint(len(tokens) - context, (batch,), generator=generator)
    x = torch.stack([tokens[s : s + context] for s in starts])
    y = torch.stack([tokens[s + 1 : s + context + 1] for s in starts])
    return x, y


def train_lm(config, train_ids, steps, batch=16, context=64, max_lr=3e-3, seed=0):
    # lecture 16, section 6: lm.train on the model of this notebook
    torch.manual_seed(seed)
    model = LM(config)
    lm.train(model, train_ids, train_ids[-2049:], steps, batch, context, max_lr=max_lr, evaluations=1, seed=seed)
    return model.eval()
''',
    "sampling": """
def sampling_distribution(scores, temperature=1.0, top_k=None, top_p=None):
    # lecture 16, section 8: lm.sampling_distribution
    return lm.sampling_distribution(scores, temperature, top_k, top_p)


@torch.no_grad()
def generate(model, prompt, n_new, generator, temperature=1.0, top_k=None, top_p=None, use_cache=True):
    # lecture 16, section 8: lm.generate
    return lm.generate(model, prompt, n_new, generator, temperature, top_k, top_p, use_cache)
""",
    "mixed": """
def mixed_precision_loss(model, x, y, dtype=torch.bfloat16):
    # lecture 16, section 5: the forward under autocast, lm.lm_loss (the loss in float32)
    with torch.autocast(x.device.type, dtype=dtype):
        return lm.lm_loss(model, x, y)


def stochastic_round_add(weight, update, generator):
    # lecture 16, section 5: bfloat16 arithmetic, 1 + 1e-4 in bfloat16
    return (weight.float() + update).to(torch.bfloat16)
""",
}


def lecture_paste(course: Course = MAIN) -> str:
    """The release with lecture 16's code in the answer cells it has code for: the sample's file text."""
    return pasted_notebook(AID, PASTED, course)


def test_every_pasted_cell_is_an_answer_cell_of_the_release():
    release = nbformat.read(str(MAIN.release_notebook(AID)), as_version=4)
    answers = {
        nbgrader_meta(c)["grade_id"] for c in release.cells if is_solution(c) and c.cell_type == "code"
    }
    assert answers - set(PASTED) == {"triton_kernel"}  # the lecture writes no Triton: its stub stays


def test_committed_lecture_paste_is_current():
    path = MAIN.samples(AID) / f"{SAMPLE}.ipynb"
    assert path.read_text(encoding="utf-8") == lecture_paste(), (
        "run `.venv/bin/python -m tests.assignments.test_a8_lecture_paste`"
    )


@pytest.mark.slow
def test_lecture_paste_earns_well_below_a_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = grade_pasted(AID, lecture_paste(), tmp_path)
    assert result.status != "error", result.reason
    assert 0 < result.score < 40, (result.score, result.reason)


if __name__ == "__main__":
    write_samples({AID: lecture_paste()})
