"""The ``qwen3-14b`` preset is Qwen3-14B's published ``config.json`` (docs/contracts.md, "Presets")."""
from __future__ import annotations

from dataclasses import replace

from transformers import Qwen3Config

from harness.casefiles import load_paths
from harness.case import PRESETS
from helpers import ROOT

# From Qwen/Qwen3-14B's config.json on the Hugging Face hub: every figure the harness models.
QWEN3_14B_CONFIG = {
    "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 17408, "vocab_size": 151936, "num_hidden_layers": 40, "rope_theta": 1000000,
    "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "tie_word_embeddings": False,
}
# config.json key -> Geometry field
GEOMETRY_OF_CONFIG = {
    "hidden_size": "hidden", "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
    "head_dim": "head_dim", "intermediate_size": "intermediate", "vocab_size": "vocab",
    "num_hidden_layers": "num_layers", "rope_theta": "rope_theta", "rms_norm_eps": "eps",
}


def test_qwen3_14b_preset_is_the_published_config():
    preset = PRESETS["qwen3-14b"]
    assert {key: getattr(preset, field) for key, field in GEOMETRY_OF_CONFIG.items()} == {
        key: QWEN3_14B_CONFIG[key] for key in GEOMETRY_OF_CONFIG}
    # batch and page size are serving choices, not model figures
    assert (preset.batch, preset.page_size, preset.num_pages) == (16, 128, None)


def test_transformers_reads_those_keys_as_the_preset_does():
    config = Qwen3Config(**QWEN3_14B_CONFIG)
    read = {key: getattr(config, key) for key in GEOMETRY_OF_CONFIG if key != "rope_theta"}
    read["rope_theta"] = config.rope_parameters["rope_theta"]
    preset = PRESETS["qwen3-14b"]
    assert read == {key: getattr(preset, field) for key, field in GEOMETRY_OF_CONFIG.items()}
    # its LM head is its own matrix (lm_head [V, H]), not the tied embedding
    assert config.tie_word_embeddings is False


def test_shipped_qwen3_14b_cases_stay_within_its_max_position_embeddings():
    model = {field: getattr(PRESETS["qwen3-14b"], field) for field in GEOMETRY_OF_CONFIG.values()}
    cases = [case for case in load_paths(ROOT / "cases")
             if replace(case.geometry, **model) == case.geometry]
    assert cases
    assert max(case.max_pos for case in cases) <= QWEN3_14B_CONFIG["max_position_embeddings"]
