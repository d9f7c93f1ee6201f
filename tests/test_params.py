"""Parameter report: counts from the config equal the built model; paper figures beside ours."""

from __future__ import annotations

import pytest
import torch

from albert_edge.config import PRESETS, AlbertConfig
from albert_edge.model import HEADS, build_model, num_params
from albert_edge.params import param_report


@pytest.mark.parametrize("name", ["albert-base-v2", "albert-large-v2", "albert-xxlarge-v2", "bert-base", "tiny"])
def test_total_is_unique_parameters_of_built_model(name):
    config = AlbertConfig.preset(name)
    with torch.device("meta"):  # counts shapes without allocating 1 GB for bert/xxlarge
        model = build_model(config)
    assert param_report(config, name).total == num_params(model)


@pytest.mark.parametrize("head", list(HEADS))
def test_heads_are_counted(head):
    config = AlbertConfig.preset("tiny")
    report = param_report(config, head=head)
    model = build_model(config, head)
    pooler = 0 if head in ("base", "pretraining", "classification") else config.hidden_size ** 2 + config.hidden_size
    assert report.total - pooler == num_params(model)


@pytest.mark.parametrize("name", [n for n in PRESETS if n != "tiny"])
def test_savings_add_up_to_bert(name):
    report = param_report(AlbertConfig.preset(name), name)
    assert report.bert_total == report.total + report.factorization_saving + report.sharing_saving


def test_albert_base_against_paper():
    report = param_report(AlbertConfig.preset("albert-base-v2"), "albert-base-v2")
    assert abs(report.total - 11_683_584) == 0
    assert report.paper["figure_m"] == 12 and "agrees" in report.paper["note"]
    assert report.bert_paper["model"] == "bert-base" and report.bert_paper["figure_m"] == 108
    assert report.sharing_saving == 11 * 7_087_872
    assert report.factorization_saving == (30000 + 512 + 2) * (768 - 128) + 2 * (768 - 128) - (128 * 768 + 768)


def test_xxlarge_difference_is_said():
    report = param_report(AlbertConfig.preset("albert-xxlarge-v2"), "albert-xxlarge-v2")
    assert report.paper["figure_m"] == 235
    assert "differs from the paper by -12.4M" in report.paper["note"]


@pytest.mark.parametrize("changes", [dict(embedding_size=16), dict(num_hidden_layers=22, num_hidden_groups=22),
                                     dict(num_hidden_layers=18, num_hidden_groups=14)], ids=str)
@pytest.mark.parametrize("layout", ["hf", "original"])
def test_layouts_are_counted(layout, changes):
    """Google's layout has no E -> H projection when E = H and may leave a group unbuilt."""
    config = AlbertConfig.preset("tiny").replace(layout=layout, **changes)
    report = param_report(config)
    assert report.total == num_params(build_model(config))
    assert report.bert_total == report.total + report.factorization_saving + report.sharing_saving


def test_multiple_choice_is_counted():
    config = AlbertConfig.preset("tiny")
    report = param_report(config, head="multiple-choice")
    assert report.total == num_params(build_model(config, "multiple-choice"))
    assert report.head_rows[0].count == config.hidden_size + 1


# -- sizes no machine holds, and configs `params` must still count ---------------------------
HUGE = dict(intermediate_size=100_000_000_000)  # 1.5e14 parameters, 560 TiB of fp32 weights


def _config_file(tmp_path, **change):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**AlbertConfig.preset("albert-base-v2").to_hf_dict(), **change}))
    return path


def test_a_model_larger_than_ram_is_refused_before_it_is_built():
    from albert_edge import device
    from albert_edge.errors import ConfigError
    from albert_edge.params import check_fits_in_memory

    config = AlbertConfig.preset("albert-base-v2").replace(**HUGE)
    ram = device.ram_bytes()
    with pytest.raises(ConfigError, match=rf"this config's model has 153,700,00\d,\d{{3}},\d{{3}} parameters: "
                                          rf"572,577.\d GiB of fp32 weights, more than this machine's "
                                          rf"{ram / 2**30:,.1f} GiB of RAM; choose smaller sizes"):
        build_model(config, "mlm")
    with torch.device("meta"):  # shapes only: nothing to allocate, nothing refused
        assert num_params(build_model(config)) == param_report(config).total
    # The figure is the unique parameter count x 4 bytes, against the RAM given.
    tiny = AlbertConfig.preset("tiny")
    need = 4 * param_report(tiny, head="qa").total
    check_fits_in_memory(tiny, "qa", ram_bytes=need)
    with pytest.raises(ConfigError, match="of fp32 weights, more than this machine's"):
        check_fits_in_memory(tiny, "qa", ram_bytes=need - 1)


@pytest.mark.parametrize("layout", ["hf", "original"])
def test_depth_ranges_by_bisection_match_every_depth(layout):
    from albert_edge.params import _depth_ranges

    for L in range(1, 40):
        for G in range(1, L + 1):
            config = AlbertConfig.preset("tiny").replace(num_hidden_layers=L, num_hidden_groups=G, layout=layout)
            walked: dict[int, tuple[int, int]] = {}
            for depth in range(L):
                g = config.group_of_depth(depth)
                walked[g] = (walked.get(g, (depth,))[0], depth)
            assert _depth_ranges(config) == walked, (L, G)


def test_params_counts_huge_sizes_without_allocating_or_crashing(tmp_path):
    """`params` only counts: a model no machine holds is counted, in a real process too, and a
    billion layers sharing one group take no longer than twelve."""
    import json
    import subprocess
    import sys

    from click.testing import CliRunner

    from albert_edge.cli import main

    base = param_report(AlbertConfig.preset("albert-base-v2")).total
    result = CliRunner().invoke(main, ["params", str(_config_file(tmp_path, **HUGE)), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] > 1.5e14
    deep = _config_file(tmp_path, num_hidden_layers=10**9)
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "params", str(deep), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total"] == base  # one shared group, whatever the depth
    biggest = _config_file(tmp_path, intermediate_size=2**63 - 1)
    assert CliRunner().invoke(main, ["params", str(biggest)]).exit_code == 0


@pytest.mark.parametrize("text, message", [
    ('{"intermediate_size": 1' + "0" * 4000 + "}",
     "intermediate_size (a 13288-bit number) is larger than any tensor dimension can be (9,223,372,036,854,775,807"),
    ('{"intermediate_size": ' + "9" * 5000 + "}", "holds a number of more than 4300 digits: not a size any model has"),
], ids=["above-int64", "5000-digits"])
def test_sizes_beyond_any_tensor_are_one_line(tmp_path, text, message):
    import json

    from click.testing import CliRunner

    from albert_edge.cli import main

    data = json.loads(_config_file(tmp_path).read_text())
    (tmp_path / "config.json").write_text(json.dumps(data)[:-1] + ", " + text[1:])
    result = CliRunner().invoke(main, ["params", str(tmp_path / "config.json")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert message in result.output, result.output


@pytest.mark.parametrize("eos, kept", [([], 3), ([5], 5), ([5, 7], 5), (None, 3)], ids=str)
def test_an_eos_token_list_is_read_as_transformers_writes_it(tmp_path, eos, kept):
    """transformers allows several end tokens (generation, which ALBERT never does): the first is
    kept, and none ([]) is not given at all, like null: the default stands."""
    import json
    import subprocess
    import sys

    from click.testing import CliRunner

    from albert_edge.cli import main

    path = _config_file(tmp_path, eos_token_id=eos)
    result = CliRunner().invoke(main, ["params", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["eos_token_id"] == kept
    proc = subprocess.run([sys.executable, "-m", "albert_edge", "params", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "11.68M" in proc.stdout, proc.stderr
