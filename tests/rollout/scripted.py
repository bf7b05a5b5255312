"""A scripted policy for rollout tests: replies chosen by a function of the row."""

from collections.abc import Callable, Sequence

from seetjax.models.tokenizer import Tokenizer
from seetjax.sampling import Completion


class ScriptedPolicy:
    """Replies chosen by a function of the row (scripted episodes, ground-truth replays): each
    reply is the text's ids plus the stop token, with logprob 0."""

    def __init__(self, tokenizer: Tokenizer, respond: Callable[[int], str]):
        self.tokenizer, self.respond = tokenizer, respond

    def start(self, prompts: Sequence[Sequence[int]]) -> None:
        pass

    def fork(self, parent: int, children: Sequence[int]) -> None:
        """Rows hold no state here: a forked row's replies come from `respond` as any row's."""

    def generate(self, rows: Sequence[int], chunks: Sequence[Sequence[int]],
                 max_new_tokens: Sequence[int]) -> list[Completion]:
        out = []
        for row, limit in zip(rows, max_new_tokens):
            ids = self.tokenizer.encode(self.respond(row)) + [self.tokenizer.reply_end_id]
            ids = ids[:limit]
            stopped = ids[-1:] == [self.tokenizer.reply_end_id]
            out.append(Completion(ids, [0.0] * len(ids), "stop" if stopped else "length"))
        return out
