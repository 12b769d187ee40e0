"""LoRA adapters loaded at run time, as vLLM 0.32 serves them with
VLLM_ALLOW_RUNTIME_LORA_UPDATING (vllm/entrypoints/openai/models/serving.py):

- POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace"}: both names are
  required (400 InvalidUserInput), a base model's name is refused (400), a name already
  loaded is refused unless load_inplace (400); a new name gets the next adapter id, a
  reload in place keeps its id. 200 with "Success: LoRA adapter '<name>' added
  successfully." as text.
- POST /v1/unload_lora_adapter {"lora_name"}: the name is removed from the API server
  only (404 NotFoundError "cannot be found" when it is not loaded); the engine keeps the
  adapter, so a stream in flight on it goes on to its end.
- A request naming an adapter is answered by the weights its id holds in the engine, and
  its chunks carry the adapter's name as their model; a name not loaded is vLLM's 404
  "The model `<name>` does not exist.".

The weights an adapter holds are its path (the answers are derived from them). A reload
in place replaces them, unless the engine keeps what it has (`stale_lora_reload`: an
engine that caches an adapter by its id and serves the old weights after a reload in
place, the failure versioned adapter names avoid).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Adapter:
    id: int
    path: str


class AdapterError(Exception):
    def __init__(self, status: int, message: str, err_type: str):
        super().__init__(message)
        self.status, self.message, self.err_type = status, message, err_type


class Adapters:
    def __init__(self, base_model: str, stale_reload: bool = False):
        self.base_model = base_model
        self.stale_reload = stale_reload
        self.names: dict[str, Adapter] = {}  # the API server's
        self.engine: dict[int, str] = {}  # the engine's: adapter id -> the weights it holds
        self._ids = 0

    def load(self, body: dict) -> str:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not (isinstance(name, str) and name and isinstance(path, str) and path):
            raise AdapterError(
                400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput"
            )
        if name == self.base_model:
            raise AdapterError(
                400,
                f"The lora adapter '{name}' conflicts with a served base model.",
                "InvalidUserInput",
            )
        inplace = bool(body.get("load_inplace"))
        if name in self.names and not inplace:
            raise AdapterError(
                400,
                f"The lora adapter '{name}' has already been loaded. If you want to load the "
                "adapter in place, set 'load_inplace' to True.",
                "InvalidUserInput",
            )
        if name in self.names:
            adapter_id = self.names[name].id
        else:
            self._ids += 1
            adapter_id = self._ids
        if adapter_id not in self.engine or not self.stale_reload:
            self.engine[adapter_id] = path
        self.names[name] = Adapter(adapter_id, path)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: dict) -> str:
        name = body.get("lora_name")
        if not (isinstance(name, str) and name):
            raise AdapterError(
                400,
                "'lora_name' needs to be provided to unload a LoRA adapter.",
                "InvalidUserInput",
            )
        if name not in self.names:
            raise AdapterError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        del self.names[name]  # the engine keeps the adapter
        return f"Success: LoRA adapter '{name}' removed successfully."

    def weights(self, name: str) -> tuple[int, str] | None:
        """The adapter id and the weights a request naming `name` is answered with; None
        when no adapter has that name."""
        adapter = self.names.get(name)
        if adapter is None:
            return None
        return adapter.id, self.engine[adapter.id]

    def cards(self) -> list[dict]:
        """The adapters in /v1/models, as vLLM lists them."""
        return [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm",
                "root": a.path,
                "parent": self.base_model,
            }
            for name, a in self.names.items()
        ]
