"""The recommendation: the most output tok/s within the TTFT/ITL budget, accuracy unflagged, as a
pasteable override; none when nothing qualifies, saying why."""

from pipeline.specs.study import StudyBudget
from pipeline.study.recommend import recommend


def cell(mapping, tp, pp, batch, tok_s, ttft, itl, kernels="fused", flags=(), ok=True):
    return {
        "key": f"{mapping}-{kernels}-128x128-b{batch}",
        "workload": "128x128",
        "mapping": mapping,
        "kernels": kernels,
        "batch_size": batch,
        "is_ok": ok,
        "series": {"tp_size": tp, "pp_size": pp, "kernels": kernels},
        "timing": {"output_tok_s": tok_s, "ttft_ms_p99": ttft, "itl_ms_p99": itl},
        "accuracy_flags": list(flags),
    }


def test_the_fastest_cell_within_budget_and_unflagged_is_chosen():
    budget = StudyBudget(ttft_p99_ms=500, itl_p99_ms=30)
    cells = [
        cell("tp1", 1, 1, 64, 9000, 400, 25),
        cell("tp2", 2, 1, 128, 15000, 450, 28),
        cell("tp2", 2, 1, 256, 20000, 900, 35),  # over the budget
        cell("pp2", 1, 2, 256, 18000, 480, 29, flags=["cloze accuracy ..."]),  # flagged
        cell("tp2", 2, 1, 512, 0, 0, 0, ok=False),  # did not fit
    ]
    (rec,) = recommend(cells, budget)
    assert rec["cell"] == "tp2-fused-128x128-b128" and rec["num_eligible"] == 2
    assert rec["override"] == (
        "python -m pipeline deploy parallel.tp_size=2 parallel.pp_size=1 "
        "build.max_batch_size=128 build.torch.use_cuda_graph=true"
    )


def test_unfused_cells_turn_the_triton_kernels_off():
    (rec,) = recommend([cell("pp2", 1, 2, 8, 100, 10, 5, kernels="unfused")], StudyBudget())
    assert rec["override"].startswith("python -m pipeline deploy ")
    assert "build.torch.use_cuda_graph=false" in rec["override"]
    assert rec["override"].endswith(" build.torch.triton_kernels=false")


def test_no_eligible_cell_says_why():
    (rec,) = recommend([cell("tp1", 1, 1, 1, 50, 5000, 500)], StudyBudget())
    assert rec["cell"] is None and "none of its 1 fitted cells" in rec["why"]
