"""Lecture-paste samples of A2 and A4: the lectures' code pasted into each assignment's answer cells, as a student who
copies the lectures would hand it in (adapted only to the signatures; nothing where the lectures have nothing).
Each must stay below 40 points: the assignments ask for the lectures' ideas applied, not pasted.

A2 gets lecture 4's branch and forward for its recursive net (one level, no recursion), lecture 2's numeric gradient
with lecture 4's backward for its gradient checker and lecture 6's SGD loop for the broken loop; A4 gets lecture 8's
gated net, export, TorchScript and compile timing, lecture 9's tf.function step and its Keras exercise with the weights
set as lecture 9 sets them. Nothing for the custom Functions, the bug report, the data-dependent loop, the graph
breaks or the custom gradient.

The samples are made from the releases, so they follow the assignments; after ``python -m autograder check <AID>
--update`` rewrite them with ``.venv/bin/python -m tests.assignments.test_lecture_paste_a2_a4``.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import Course, is_solution, nbgrader_meta
from tests.fixtures.lecture_paste import MAIN, SAMPLE, grade_pasted, pasted_notebook, write_samples

# assignment -> answer cell -> the lectures' code for it, adapted only to the signature
PASTED = {
    "A2": {
        "gradient_check": """
from dlcourse.gradients import numeric_gradient, rel_error


def max_relative_error(fn, inputs, h=1e-6):
    # lecture 4, section 1: autograd's gradients; lecture 2, section 1: numeric ones, compared with rel_error
    inputs = [x.detach().requires_grad_() for x in inputs]
    fn(*inputs).backward()
    worst = 0.0
    for i, x in enumerate(inputs):
        others = [y.detach() for y in inputs]

        def f(v, i=i, others=others):
            others[i] = torch.from_numpy(v)
            return fn(*others).item()

        numeric = numeric_gradient(f, x.detach().numpy().copy(), h)
        analytic = x.grad.numpy() if x.grad is not None else 0 * numeric
        worst = max(worst, rel_error(analytic, numeric))
    return worst
""",
        "train_fixed": """
def train_fixed(model, x, y, x_val, y_val, lr, steps):
    # lecture 6, step 2: the loop with torch.optim.SGD (the loss of this classifier)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(x_val), y_val)
        history.append((loss.item(), val_loss.item()))
    return history
""",
        "tree_encode": """
def tree_encode(tree, embeddings, weights):
    # lecture 4, section 7: plain Python picks this step's weights, then the layer's forward
    label, left, right = tree
    w, b = weights[label]
    return torch.tanh(torch.cat([embeddings[left], embeddings[right]]) @ w + b)
""",
    },
    "A4": {
        "pair_gate": """
class PairGate(nn.Module):
    # lecture 8, torch.export: SwitchNetCond, with the layers the docstring names
    def __init__(self, D_in, H, D_out):
        super().__init__()
        self.linear1 = nn.Linear(2 * D_in, H)
        self.w2a = nn.Linear(H, D_out)
        self.w2b = nn.Linear(H, D_out)

    def forward(self, x, mask, prev_loss):
        h_relu = self.linear1(x).clamp(min=0)
        return torch.cond(prev_loss < 5.0, lambda h: self.w2a(h), lambda h: self.w2b(h), (h_relu,))


def export_pair_gate(model, x, mask, prev_loss, path):
    # lecture 8: a dynamic batch dimension, then torch.export.save
    batch = torch.export.Dim("batch")
    exported = torch.export.export(
        model, (x, mask, prev_loss), dynamic_shapes={"x": {0: batch}, "mask": {0: batch}, "prev_loss": None}
    )
    torch.export.save(exported, path)
    return exported
""",
        "script": """
def gated_model(
    x: torch.Tensor, w1: torch.Tensor, w2a: torch.Tensor, w2b: torch.Tensor, prev_loss: float
) -> torch.Tensor:
    # lecture 8: the running example's model, without its loss
    w2 = w2a if prev_loss < 5.0 else w2b
    return x.mm(w1).clamp(min=0).mm(w2)


def script_gated_model():
    # lecture 8, TorchScript: torch.jit.script
    return torch.jit.script(gated_model)
""",
        "measure_compile": """
from dlcourse.measure import time_it


def measure_compile_speedup(fn, x, repeat=20):
    # lecture 8, torch.compile: the first call timed alone, then time_it eager and compiled
    compiled = torch.compile(fn)
    start = time.perf_counter()
    result = compiled(x)
    dlcourse.device.synchronize(x.device)
    first_call_s = time.perf_counter() - start
    eager_time = time_it(lambda: fn(x), repeat=repeat, warmup=2, device=x.device)
    compiled_time = time_it(lambda: compiled(x), repeat=repeat, warmup=2, device=x.device)
    return {
        "first_call_s": first_call_s,
        "eager_s": eager_time.best,
        "compiled_s": compiled_time.best,
        "speedup": eager_time.best / compiled_time.best,
        "max_abs_diff": float((result - fn(x)).abs().max()),
    }
""",
        "train_step_graph": """
def make_train_step_graph(model_vars):
    # lecture 9, section 5: the training step as a tf.function
    @tf.function
    def step(x, y, lr):
        return train_step(model_vars, x, y, lr)

    return step
""",
        "keras_from_torch": """
def keras_from_torch(state_dict, height, width):
    # lecture 9, exercise 2 and section 6: the Sequential model, given the same weights as torch's
    w1, b1 = state_dict["fc1.weight"].numpy(), state_dict["fc1.bias"].numpy()
    w2, b2 = state_dict["fc2.weight"].numpy(), state_dict["fc2.bias"].numpy()
    D_in, H = w1.shape
    D_out = w2.shape[1]
    model = keras.Sequential(
        [keras.Input(shape=(D_in,)), keras.layers.Dense(H, activation="relu"), keras.layers.Dense(D_out)]
    )
    model.layers[0].set_weights([w1, b1])
    model.layers[1].set_weights([w2, b2])
    return model
""",
    },
}
# the answer cells the lectures have no code for
LEFT_AS_STUBS = {
    "A2": {"logsumexp", "softmax_ce", "bug_report", "shrink_until_small"},
    "A4": {"scores_without_breaks", "fake_quantize"},
}
AIDS = sorted(PASTED)


def lecture_paste(aid: str, course: Course = MAIN) -> str:
    """The release with the lectures' code in the answer cells they have code for: the sample's file text."""
    return pasted_notebook(aid, PASTED[aid], course)


@pytest.mark.parametrize("aid", AIDS)
def test_every_pasted_cell_is_an_answer_cell_of_the_release(aid):
    release = nbformat.read(str(MAIN.release_notebook(aid)), as_version=4)
    answers = {
        nbgrader_meta(c)["grade_id"] for c in release.cells if is_solution(c) and c.cell_type == "code"
    }
    assert set(PASTED[aid]) <= answers
    assert answers - set(PASTED[aid]) == LEFT_AS_STUBS[aid]


@pytest.mark.parametrize("aid", AIDS)
def test_committed_lecture_paste_is_current(aid):
    path = MAIN.samples(aid) / f"{SAMPLE}.ipynb"
    assert path.read_text(encoding="utf-8") == lecture_paste(aid), (
        "run `.venv/bin/python -m tests.assignments.test_lecture_paste_a2_a4`"
    )


@pytest.mark.slow
@pytest.mark.parametrize("aid", AIDS)
def test_lecture_paste_earns_well_below_a_pass(aid, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = grade_pasted(aid, lecture_paste(aid), tmp_path)
    assert result.status != "error", result.reason
    print(f"{aid} lecture_paste: {result.score}/100")
    assert result.score < 40, (result.score, result.reason)


if __name__ == "__main__":
    write_samples({aid: lecture_paste(aid) for aid in AIDS})
