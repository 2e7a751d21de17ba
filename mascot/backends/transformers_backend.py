"""transformers backend: one base model in memory, LoRA adapters switched per call with peft.

Default for the chat on CPU (bf16) and usable on GPU. Streaming uses TextIteratorStreamer; a lock
serialises generation because the active adapter is global state of the shared model.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mascot.backends.base import Backend, BackendInfo, Completion, GenerationParams, Messages, cut_at_stop
from mascot.errors import BackendError
from mascot.files.model_files import resolve_model

log = logging.getLogger(__name__)


def pick_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype in ("auto", ""):
        return torch.bfloat16  # measured: bf16 decodes ~2x faster than fp32 on CPU for SmolLM2
    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise BackendError(f"Unknown dtype {dtype!r}. Valid dtypes: auto, {', '.join(table)}.")
    return table[dtype]


class TransformersBackend(Backend):
    """Hugging Face transformers + peft on CPU or GPU."""

    kind = "transformers"

    def __init__(self, model: str = "embedded", dtype: str = "auto", device: str = "auto", model_obj: Any = None,
                 tokenizer: Any = None) -> None:
        super().__init__()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.model_name = model
        self._lock = threading.RLock()
        if model_obj is not None:  # an already-built model (tests, trainers)
            self.model, self.tokenizer = model_obj, tokenizer
        else:
            path = resolve_model(model)
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
                self.model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=pick_dtype(dtype, self.device), local_files_only=True
                ).to(self.device)
            except OSError as exc:
                raise BackendError(
                    f"Could not load model {model!r} from local files ({exc}). Use `embedded`, a local model "
                    "folder, or a hub name already in the local Hugging Face cache (nothing is downloaded)."
                ) from exc
        self.model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = str(next(self.model.parameters()).dtype).replace("torch.", "")

    # ----------------------------------------------------------------- adapters
    def add_adapter(self, name: str, path: str) -> None:
        """Load a PEFT LoRA folder onto the shared base; raises BackendError if it does not fit."""
        from peft import PeftModel

        cfg_file = Path(path) / "adapter_config.json"
        if not cfg_file.exists():
            raise BackendError(f"Adapter {name!r}: {path} is not a PEFT adapter folder (no adapter_config.json).")
        with self._lock:
            try:
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(path, adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name)
                self.model.eval()
            except Exception as exc:  # shape mismatch, wrong base, corrupt weights
                base = json.loads(cfg_file.read_text()).get("base_model_name_or_path", "?")
                raise BackendError(
                    f"Adapter {name!r} at {path} does not fit the loaded base model {self.model_name!r} "
                    f"(it was trained on {base!r}): {str(exc).splitlines()[0][:200]}"
                ) from exc
        self.adapters[name] = path

    @contextmanager
    def _use_adapter(self, adapter: str | None) -> Iterator[None]:
        from peft import PeftModel

        if adapter is not None and adapter not in self.adapters:
            raise BackendError(f"Adapter {adapter!r} is not loaded. Loaded adapters: {', '.join(self.adapters) or 'none'}.")
        if not isinstance(self.model, PeftModel):
            yield
        elif adapter is None:
            with self.model.disable_adapter():
                yield
        else:
            self.model.set_adapter(adapter)
            yield

    # --------------------------------------------------------------- generation
    def _encode(self, batch: Sequence[Messages], params: GenerationParams) -> Any:
        texts = [
            self.tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) + params.prefill
            for m in batch
        ]
        return self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)

    def _gen_kwargs(self, params: GenerationParams) -> dict[str, Any]:
        import torch

        if params.seed is not None:
            torch.manual_seed(params.seed)
        kw: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if params.temperature > 0:
            kw.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        else:
            kw.update(do_sample=False)
        if params.repetition_penalty != 1.0:
            kw["repetition_penalty"] = params.repetition_penalty
        if params.stop:
            kw.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        return kw

    def generate(self, batch: Sequence[Messages], params: GenerationParams, adapter: str | None = None) -> list[Completion]:
        import torch

        if not batch:
            return []
        with self._lock, self._use_adapter(adapter), torch.inference_mode():
            enc = self._encode(batch, params)
            out = self.model.generate(**enc, **self._gen_kwargs(params))
        n_prompt = enc["input_ids"].shape[1]
        results = []
        for row, mask in zip(out, enc["attention_mask"]):
            new = row[n_prompt:]
            n_new = int((new != self.tokenizer.pad_token_id).sum())
            text, hit = cut_at_stop(self.tokenizer.decode(new, skip_special_tokens=True), params.stop)
            finish = "stop" if hit or n_new < params.max_new_tokens else "length"
            results.append(Completion(text, int(mask.sum()), n_new, finish))
        return results

    def score(self, messages: Messages, continuations: Sequence[str], params: GenerationParams,
              adapter: str | None = None) -> list[float]:
        """Sum of token log-probabilities of each continuation after the prompt (+ prefill): the prompt
        is encoded once and its key/value cache shared by every continuation (one batched forward)."""
        import torch

        if not continuations:
            return []
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + params.prefill
        p_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        conts = [self.tokenizer(c, add_special_tokens=False)["input_ids"] for c in continuations]
        if not p_ids or any(not c for c in conts):
            raise BackendError("Cannot score an empty prompt or an empty continuation.")
        width = max(len(c) for c in conts)
        pad = self.tokenizer.pad_token_id
        cont = torch.tensor([c + [pad] * (width - len(c)) for c in conts], device=self.device)
        cmask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in conts], device=self.device)
        k = len(conts)
        with self._lock, self._use_adapter(adapter), torch.inference_mode():
            head = self.model(input_ids=torch.tensor([p_ids], device=self.device), use_cache=True)
            cache = head.past_key_values
            cache.batch_repeat_interleave(k)
            mask = torch.cat([torch.ones(k, len(p_ids), dtype=cmask.dtype, device=self.device), cmask], dim=1)
            tail = self.model(input_ids=cont, attention_mask=mask, past_key_values=cache, use_cache=True)
        # the logits predicting continuation token j sit at the prompt's last position (j=0) or at j-1
        logits = torch.cat([head.logits[:, -1:, :].expand(k, 1, -1), tail.logits[:, :-1, :]], dim=1).float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, cont.unsqueeze(-1)).squeeze(-1)
        return [float(x) for x in (logp * cmask).sum(dim=1).cpu()]

    def stream(self, messages: Messages, params: GenerationParams, adapter: str | None = None) -> Iterator[str]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        errors: list[BaseException] = []
        cancel = threading.Event()

        class _Cancelled(StoppingCriteria):
            """Ends generation as soon as the consumer stops reading (stop button, stop string)."""

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
                return cancel.is_set()

        def work() -> None:
            try:
                kwargs = self._gen_kwargs(params)
                kwargs["stopping_criteria"] = StoppingCriteriaList([_Cancelled()])
                with torch.inference_mode():
                    self.model.generate(**enc, **kwargs, streamer=streamer)
            except BaseException as exc:  # surfaced to the consumer below
                errors.append(exc)
                streamer.end()

        with self._lock, self._use_adapter(adapter):
            enc = self._encode([messages], params)
            thread = threading.Thread(target=work, daemon=True)
            thread.start()
            emitted = ""
            try:
                for delta in streamer:
                    text, hit = cut_at_stop(emitted + delta, params.stop)
                    if len(text) > len(emitted):
                        yield text[len(emitted):]
                    emitted = text
                    if hit:
                        break
            finally:
                cancel.set()
                thread.join()
        if errors:
            raise BackendError(f"Generation failed: {errors[0]}") from errors[0]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def info(self) -> BackendInfo:
        return BackendInfo("transformers", self.model_name, self.device, self.dtype, dict(self.adapters))
