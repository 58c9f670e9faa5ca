"""Episodes of a model in an environment: the prompt it sees, one generated reply per turn stepped through the
environment and recorded (transcript's EpisodeRecorder), and `play`, which runs a set of episodes to the end in batches.
"""
from __future__ import annotations

import time

from envs.core.contract import EnvironmentFault
from envs.core.episode import EPISODE_TRIES, EpisodeLost
from trainers.generation.generate import END_OF_TURN, STOP_REPETITION, Generation, looping
from trainers.modeling.chat import normalize_tools, prompt_ids, turn_continuation
from transcript.recorder import EpisodeRecorder
from transcript.toolcalls import parse_tool_calls


class Episode:
    """One evaluation episode: the environment, the recorder, and the token ids the model sees next.

    An environment that fails (EnvironmentFault: a dead browser, a page error) at reset is reset again, up to
    EPISODE_TRIES times (envs/core/episode.py); one that fails mid-episode ends it with a `fault`, and `restart()` plays it
    again from its reset (play does, within the same tries)."""

    def __init__(self, env, task_id: str, seed: int, tok):
        self.env, self.task_id, self.seed, self.tok = env, task_id, seed, tok
        self.tries = 0
        self._start()

    def _start(self) -> None:
        for _ in range(EPISODE_TRIES - self.tries):
            self.tries += 1
            try:
                obs, info = self.env.reset(seed=self.seed, options={"task_id": self.task_id})
                break
            except EnvironmentFault as exc:
                reason = str(exc)
        else:
            raise EpisodeLost(f"{self.tries} tries failed; the last: {reason}")
        tok = self.tok
        self.tools = normalize_tools(info["tools"])
        self.recorder = EpisodeRecorder(obs, info)
        self.ids = prompt_ids(tok, self.recorder.messages, self.tools)
        self.prompt_tokens = len(self.ids)
        self.valid_calls = 0
        self.first_call_valid: bool | None = None  # the first reply: a well-formed tool call (quotes escaped)?
        self.finishes: list[str] = []  # each reply's finish_reason ("repetition": cut by the loop stop)
        self.loops_at_limit = 0  # replies that ran to the token limit in a loop (the stop off, or one it missed)

    @property
    def done(self) -> bool:
        return self.recorder.done

    @property
    def fault(self) -> str:
        """Why the environment (not the model) ended the episode; "" when it did not."""
        return (self.recorder.final or {}).get("fault", "")

    def restart(self) -> bool:
        """Play a faulted episode again from its reset when tries are left (True), else keep it as it ended."""
        if not self.fault or self.tries >= EPISODE_TRIES:
            return False
        self._start()
        return True

    @property
    def turns(self) -> int:
        return self.recorder.turns

    @property
    def messages(self) -> list[dict]:
        return self.recorder.messages

    def advance(self, tok, gen: Generation, max_context: int) -> None:
        """Step the environment with one generated reply and extend the prompt with its answer."""
        new_ids = gen.token_ids
        text = tok.decode(new_ids, skip_special_tokens=True)
        valid = parse_tool_calls(text).valid_tool_call
        self.valid_calls += valid
        if self.first_call_valid is None:
            self.first_call_valid = bool(valid)
        self.finishes.append(gen.finish_reason)
        # a reply cut at the token limit whose tail loops, judged as the default stop would have
        if gen.finish_reason == "length" and looping(new_ids, STOP_REPETITION):
            self.loops_at_limit += 1
        obs, r, term, trunc, info = self.env.step(text)
        tools = self.recorder.add_step(text, obs, r, term, trunc, info)
        if self.done:
            return
        eos = tok.convert_tokens_to_ids(END_OF_TURN)
        if not new_ids or new_ids[-1] != eos:
            new_ids = new_ids + [eos]
        cont = turn_continuation(tok, self.recorder.messages, self.tools, len(tools), END_OF_TURN)
        self.ids += new_ids + tok.encode(cont, add_special_tokens=False)
        if len(self.ids) >= max_context:
            self.recorder.stop()

    def result(self) -> dict:
        rec = self.recorder
        return {"task_id": self.task_id, "reward": round(rec.reward, 4), "success": rec.success, "turns": rec.turns,
                "valid_tool_call_rate": self.valid_calls / max(1, rec.turns), "first_call_valid": bool(self.first_call_valid),
                "repetition_stops": self.finishes.count("repetition"), "length_stops": self.finishes.count("length"),
                "loops_at_limit": self.loops_at_limit,
                "first_action": rec.steps[0]["action"][:300] if rec.steps else "",  # what first_call_valid judged
                "final_action": rec.steps[-1]["action"][:300] if rec.steps else ""}


def play(episodes, generate, tok, batch_size: int, max_context: int, on_done=None, forget=None,
         window: int | None = None) -> float:
    """Run episodes to the end: each round, one batched `generate(prompts, episodes) -> [Generation]` call per
    `batch_size` live episodes (shortest prompts together), then one env step per episode; `forget(episode)` once
    an episode has ended (generation.Turns frees its KV cache) and `on_done(episode)` after that. `episodes` may be
    a lazy iterable (each Episode resets its environment as it is made): at most `window` of them are live at once
    (default: all), the next one started as one ends, so a thousand tasks hold `window` environments (browser tabs)
    at a time. A faulted episode (the environment failed) is restarted while it has tries left. Returns the
    seconds spent generating."""
    source = iter(episodes)
    live: list[Episode] = []
    gen_s = 0.0
    while True:
        while window is None or len(live) < window:
            e = next(source, None)
            if e is None:
                break
            live.append(e)
        if not live:
            return gen_s
        live.sort(key=lambda e: len(e.ids))
        for b in range(0, len(live), batch_size):
            chunk = live[b : b + batch_size]
            tg = time.perf_counter()
            outs = generate([e.ids for e in chunk], chunk)
            gen_s += time.perf_counter() - tg
            for e, gen in zip(chunk, outs):
                e.advance(tok, gen, max_context)
                if e.done:
                    if forget is not None:
                        forget(e)
                    if e.restart():
                        continue
                    if on_done:
                        on_done(e)
        live = [e for e in live if not e.done]
