"""The apply prompt, rendered from `prompts/apply.toml` (the one template inference and training share)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".ts": "typescript", ".tsx": "tsx", ".jsx": "jsx", ".rs": "rust", ".go": "go",
    ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".rb": "ruby", ".sh": "bash", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml",
    ".json": "json", ".md": "markdown", ".html": "html", ".css": "css", ".sql": "sql",
}  # fmt: skip

CLOSING_FENCE = "```"


def prompts_dir() -> Path:
    here = Path(__file__).resolve().parent.parent
    packaged = here / "prompts"  # inside an installed wheel
    return packaged if packaged.is_dir() else here.parent / "prompts"  # a source checkout


@lru_cache(maxsize=None)
def load_template(name: str = "apply") -> dict[str, str]:
    with open(prompts_dir() / f"{name}.toml", "rb") as handle:
        return tomllib.load(handle)


def language_for(path: str | Path) -> str:
    return LANGUAGES.get(Path(path).suffix.lower(), "")


@dataclass(frozen=True)
class ApplyPrompt:
    """Chat messages for one edit, plus the text the answer starts with."""

    messages: list[dict[str, str]]
    response_prefix: str

    @classmethod
    def build(cls, path: str, code: str, instruction: str = "", update: str | None = None) -> ApplyPrompt:
        """An instruction edit, or (with `update`) a lazy-snippet merge."""
        template = load_template("apply")
        fields = {
            "path": path,
            "language": language_for(path),
            "code": _strip_final_newline(code),
            "instruction": instruction.strip(),
            "update": _strip_final_newline(update or ""),
        }
        user = template["user_update"] if update is not None else template["user"]
        messages = [
            {"role": "system", "content": template["system"].format(**fields)},
            {"role": "user", "content": user.format(**fields)},
        ]
        return cls(messages, template["response_prefix"].format(**fields))

    def render(self, tokenizer) -> str:
        """Prompt text for a tokenizer with a chat template; the answer's prefix is already in it."""
        chat = tokenizer.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)
        return chat + self.response_prefix


def _strip_final_newline(text: str) -> str:
    # A fence closes on its own line, so one final newline is the fence's, not the text's.
    return text[:-1] if text.endswith("\n") else text


def completion_for(new_code: str) -> str:
    """What the model should write after the prefix: the whole new file, then the closing fence."""
    body = new_code if new_code.endswith("\n") or not new_code else new_code + "\n"
    return body + CLOSING_FENCE
