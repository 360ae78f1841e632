"""TPU plans: only the chip counts a slice has (issue 27: render every plan), and unknown energy is not zero.

Cloud TPU rents v5e in slices of 1, 4 or 8 chips on one host (more across hosts) and v4/v5p from 4
chips up; a 2-chip v5e plan cannot be submitted to any engine. The sizes are catalog data
(``accelerators.csv`` ``slice_sizes``), so the planner needs no TPU knowledge of its own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from computewise.catalog import Catalog, load_catalog
from computewise.errors import CatalogError
from computewise.estimate import Assumptions
from computewise.models import preset
from computewise.plan import TrainConstraints, plan_train

HEADER = (
    "slug,name,vendor,kind,aliases,memory_bytes,memory_bandwidth_bytes_per_s,fp32_flops,tf32_flops,"
    "bf16_flops,fp16_flops,fp8_flops,int8_flops,tdp_w,interconnect_bytes_per_s,form_factor,slice_sizes,source,retrieved"
)


def test_the_bundled_tpus_name_their_slices(catalog: Catalog) -> None:
    assert catalog.accelerator("tpu-v5e").slice_sizes[:3] == (1, 4, 8)
    assert not catalog.accelerator("tpu-v5e").rents(2)
    assert catalog.accelerator("tpu-v5p").slice_sizes[0] == 4
    assert catalog.accelerator("h100-sxm").rents(3)  # no slice sizes: any count


@pytest.mark.parametrize(("gpu", "absent"), [("tpu-v5e", {2}), ("tpu-v5p", {1, 2})])
def test_the_planner_considers_only_slice_sizes(
    gpu: str, absent: set[int], catalog: Catalog, assumptions: Assumptions
) -> None:
    constraints = TrainConstraints(tokens=1e9, seq_len=1024, global_batch=256, accelerators=(gpu,), max_gpus=8)
    plan = plan_train(preset("gpt2"), catalog, assumptions, constraints)
    counts = {option.gpus for option in plan.candidates}
    assert counts and not counts & absent
    assert counts <= set(catalog.accelerator(gpu).slice_sizes)


@pytest.mark.parametrize("cell", ["4|2", "4|x", "0|4"])
def test_a_malformed_slice_list_names_the_cell(cell: str, tmp_path: Path) -> None:
    row = f"x1,Example X1,Acme,tpu,,8e10,2e12,0,0,4e14,0,0,0,200,1e11,chip,{cell},test sheet,2025-01-02"
    path = tmp_path / "accelerators-mine.csv"
    path.write_text(f"{HEADER}\n{row}\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="slice_sizes"):
        load_catalog([path])


def test_a_tpu_without_a_published_power_figure_has_unknown_energy_not_zero(
    catalog: Catalog, assumptions: Assumptions
) -> None:
    """Issue 27: "unknown is never zero" (TPU v5e and v5p publish no TDP; v4 does)."""
    constraints = TrainConstraints(tokens=1e9, seq_len=1024, global_batch=256, accelerators=("tpu-v5e",), max_gpus=8)
    unknown = plan_train(preset("gpt2"), catalog, assumptions, constraints).recommended
    assert unknown.energy_kwh is None and unknown.co2_kg is None
    document = unknown.to_dict()
    assert document["energy"]["kwh"] is None and document["co2"]["kg"] is None
    known = plan_train(preset("gpt2"), catalog, assumptions, replace(constraints, accelerators=("tpu-v4",)))
    assert known.recommended.energy_kwh is not None and known.recommended.energy_kwh > 0
