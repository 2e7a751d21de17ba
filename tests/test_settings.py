"""The one settings object: read from MASCOT_* by the entry points, typed, with clear errors."""

from __future__ import annotations

import pytest

from mascot.errors import ConfigError
from mascot.settings import Settings


def test_fields_come_from_the_environment_and_overrides_win(tmp_path):
    env = {"MASCOT_DATA_DIR": str(tmp_path), "MASCOT_LLAMACPP_THREADS": "2", "MASCOT_SAFETY_LLM_JUDGE": "yes",
           "MASCOT_LLAMACPP_WEIGHTS": "q8_0", "OPENAI_BASE_URL": "http://judge:1/v1"}
    s = Settings.from_env(env, llamacpp_weights="bf16")
    assert s.data_dir == str(tmp_path) and s.llamacpp_threads == 2 and s.safety_llm_judge is True
    assert s.llamacpp_weights == "bf16"  # the explicit override
    assert s.safety_log == str(tmp_path / "safety_events.sqlite")
    assert s.annotation_db_url == f"sqlite:///{tmp_path / 'annotation.db'}"
    assert s.judge_base_url == "http://judge:1/v1"  # the OpenAI client's variable as a fallback
    assert s.backend_options()["threads"] == 2 and s.backend_options()["weights"] == "bf16"


def test_empty_variables_keep_the_defaults():
    assert Settings.from_env({"MASCOT_LLAMACPP_WEIGHTS": ""}).llamacpp_weights == "auto"


@pytest.mark.parametrize("name, value, words", [("MASCOT_LLAMACPP_THREADS", "two", "whole number"),
                                                ("MASCOT_LLAMACPP_PROBE", "maybe", "use one of")])
def test_a_malformed_value_names_the_variable(name, value, words):
    with pytest.raises(ConfigError, match=f"{name}.*{words}"):
        Settings.from_env({name: value})


def test_the_app_settings_extend_the_engine_settings(tmp_path):
    from app.settings import Settings as AppSettings

    s = AppSettings.from_env({"MASCOT_PORT": "8080", "MASCOT_WARMUP": "0", "MASCOT_CACHE_DIR": str(tmp_path)})
    assert s.port == 8080 and s.warmup is False and s.cache_dir == str(tmp_path) and isinstance(s, Settings)
