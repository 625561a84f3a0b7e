"""The endpoints (openapi.ENDPOINTS): /v1/completions, /v1/chat/completions, /v1/models,
/tokenize, /detokenize, /health, /metrics, /version, /openapi.json, /docs.

A generation request passes admission (key, size), is parsed and planned (every refusal a 400
before anything runs), takes its engine slots (waiting in the admission's queue for them if it
must; a client that leaves meanwhile leaves the queue), then streams: as server-sent events, or
gathered into one body. The first piece is awaited before the response starts, so a request the
model refuses still gets its status. A client that goes away cancels its engine requests: a stream's
response is cancelled by its EventStream when the connection drops; a whole answer is watched.
"""

import asyncio
import json
import time
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

import pipeline
from pipeline.client.metrics import engines_ready
from pipeline.lora.adapters import adapter_dirs
from pipeline.openai_api import choices
from pipeline.openai_api.admission import Admission, check_api_key, read_body
from pipeline.openai_api.errors import RETRY_AFTER_S, APIError, bad_request
from pipeline.openai_api.event_stream import EventStream
from pipeline.openai_api.generation import choice_pieces, merged
from pipeline.openai_api.guides import request_guide
from pipeline.openai_api.logprobs import LogprobsWriter
from pipeline.openai_api.metrics import FrontendMetrics
from pipeline.openai_api.openapi import DOCS_HTML, openapi_document
from pipeline.openai_api.protocol import ChatCompletionRequest, CompletionRequest, parse
from pipeline.openai_api.responses import DONE, Answer, Shape, sse, usage
from pipeline.openai_api.schemas import (
    DetokenizeRequest,
    DetokenizeResponse,
    ModelCard,
    ModelList,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
    Version,
)
from pipeline.openai_api.served_model import Prompt, ServedModel
from pipeline.openai_api.tool_calls import (
    ToolPlan,
    renders_tools,
    template_messages,
    tool_plan,
    tools_system_message,
)
from pipeline.openai_api.tool_stream import tool_pieces
from pipeline.openai_api.triton_llm import EngineError, TritonLLM
from pipeline.specs.serve import OpenAISpec

CLIENT_GONE = 499  # the status recorded for a request whose client left (nginx's)


class Frontend:
    def __init__(
        self,
        model: ServedModel,
        llm: TritonLLM,
        settings: OpenAISpec,
        api_key: str,
        engine_metrics_url: str,
        created: int,
        admission: Admission | None = None,
        metrics: FrontendMetrics | None = None,
        lora_dir: str = "",
    ):
        """created: the model card's time (the same in every process). admission, metrics:
        shared with the other frontend processes on the port (workers); None: this process's
        own."""
        self.model, self.llm, self.settings, self.api_key = model, llm, settings, api_key
        self.engine_metrics_url = engine_metrics_url
        self.admission = admission or Admission(
            settings.max_concurrent_requests, settings.max_queued_requests
        )
        self.metrics = metrics or FrontendMetrics(self.admission, engine_metrics_url)
        self.created = created
        self._openapi = openapi_document()
        # LoRA adapters, each a model of its own: the dir is read at each ask, so an adapter
        # copied into the repository is served without a restart
        self.lora_dir = Path(lora_dir) if lora_dir else None

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, is_chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, is_chat=True)

    async def models(self, request: Request) -> Response:
        check_api_key(request, self.api_key)
        cards = [self._card(), *(self._card(name) for name in adapter_dirs(self.lora_dir))]
        return JSONResponse(ModelList(data=cards).model_dump(exclude_none=True))

    async def model_card(self, request: Request) -> Response:
        check_api_key(request, self.api_key)
        adapter = self._check_model(request.path_params["model"], "model")
        return JSONResponse(self._card(adapter).model_dump(exclude_none=True))

    async def tokenize(self, request: Request) -> Response:
        """vLLM's /tokenize: a prompt, or chat messages through the template."""
        check_api_key(request, self.api_key)
        body = await read_body(request, self.settings.max_request_bytes)
        try:  # which of the two shapes; a body that is no JSON object: parse's 400 says so
            is_chat = "messages" in json.loads(body)
        except (ValueError, TypeError):
            is_chat = False
        parsed = parse(TokenizeChatRequest if is_chat else TokenizeCompletionRequest, body)
        if parsed.model is not None:
            self._check_model(parsed.model, "model")
        prompt = self._chat_prompt(parsed) if is_chat else self.model.encode_prompt(parsed.prompt)
        tokens = prompt.token_ids
        return JSONResponse(
            TokenizeResponse(
                tokens=tokens, count=len(tokens), max_model_len=self.model.limits.max_seq_len
            ).model_dump()
        )

    async def detokenize(self, request: Request) -> Response:
        check_api_key(request, self.api_key)
        body = await read_body(request, self.settings.max_request_bytes)
        parsed = parse(DetokenizeRequest, body)
        if parsed.model is not None:
            self._check_model(parsed.model, "model")
        self.model.check_token_ids(parsed.tokens, "tokens")
        text = self.model.detokenizer.decode(parsed.tokens)
        return JSONResponse(DetokenizeResponse(prompt=text).model_dump())

    async def version(self, request: Request) -> Response:
        return JSONResponse(Version(version=pipeline.__version__).model_dump())

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self._openapi)

    async def docs(self, request: Request) -> Response:
        return HTMLResponse(DOCS_HTML)

    async def health(self, request: Request) -> Response:
        is_ready = await self.llm.is_ready() and await anyio.to_thread.run_sync(
            engines_ready, self.engine_metrics_url
        )
        if is_ready:
            return JSONResponse({"status": "ok"})
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        return JSONResponse({"status": "unavailable"}, status_code=503, headers=headers)

    async def prometheus(self, request: Request) -> Response:
        # in a thread: it reads tritonserver's metrics
        exposition = await anyio.to_thread.run_sync(self.metrics.exposition)
        return Response(exposition, media_type=CONTENT_TYPE_LATEST)

    def _card(self, adapter: str | None = None) -> ModelCard:
        """The base model's card, or an adapter's (its dir as root, the base as parent)."""
        return ModelCard(
            id=adapter or self.model.name,
            created=self.created,
            owned_by="llm-pipeline",
            root=str(self.model.tokenizer_dir if adapter is None else self.lora_dir / adapter),
            max_model_len=self.model.limits.max_seq_len,
            parent=None if adapter is None else self.model.name,
        )

    def _check_model(self, name: str, param: str) -> str | None:
        """The adapter `name` asks for (None: the base model); 404 naming every model served."""
        if name == self.model.name:
            return None
        adapters = adapter_dirs(self.lora_dir)
        if name in adapters:
            return name
        served = ", ".join(f"`{n}`" for n in [self.model.name, *adapters])
        raise APIError(
            404,
            f"The model `{name}` does not exist; this server serves {served} (GET /v1/models)",
            param,
            "model_not_found",
        )

    async def _generate(self, request: Request, is_chat: bool) -> Response:
        start = time.perf_counter()
        check_api_key(request, self.api_key)
        body = await read_body(request, self.settings.max_request_bytes)
        parsed = parse(ChatCompletionRequest if is_chat else CompletionRequest, body)
        adapter = self._check_model(parsed.model, "model")
        tools = tool_plan(parsed, self.model.chat_template) if is_chat else None
        guide = request_guide(parsed, tools.guide if tools else None)
        if is_chat:
            prompts, param = [self._chat_prompt(parsed, tools)], "messages"
            max_tokens = parsed.requested_max_tokens()
        else:
            prompts, param, max_tokens = self._prompts(parsed.prompt), "prompt", parsed.max_tokens
        plan = choices.plan(parsed, prompts, max_tokens, self.model, self.settings, param, guide)
        if adapter is not None:
            plan.choices[:] = [
                replace(c, params=replace(c.params, lora_name=adapter)) for c in plan.choices
            ]
        ticket = self.admission.take_now(len(plan.choices))
        if ticket is None:  # it waits in the queue, unless its client leaves first
            ticket = await _unless_client_leaves(
                request, self.admission.take(len(plan.choices), parsed.priority)
            )
        self.metrics.queue_wait.observe(ticket.waited_s)
        shape = Shape(is_chat, adapter or self.model.name)
        is_echoed = getattr(parsed, "echo", False)
        echoes = [self.model.echo(c.prompt) if is_echoed else "" for c in plan.choices]
        streams = [
            choice_pieces(self.llm, self.model.detokenizer, c, plan.stops) for c in plan.choices
        ]
        if tools is not None and tools.reads_calls:
            streams = [tool_pieces(stream, tools) for stream in streams]
        pieces = merged(streams)

        async def finish() -> None:  # every way out: the engine requests end, the slots free
            try:
                await pieces.aclose()
            finally:
                ticket.give_back()

        is_streamed = False
        try:
            first = await anext(pieces)  # a refusal by the model still gets its status
            first_at = time.perf_counter()
            self.metrics.ttft.observe(first_at - start)
            if parsed.stream:
                options = parsed.stream_options
                writer = self._logprobs_writer(parsed, is_chat, plan)
                times = (start, first_at)
                events = self._events(shape, plan, first, pieces, echoes, options, writer, times)
                is_streamed = True  # EventStream runs finish() after the stream, client gone or not
                return EventStream(
                    events,
                    media_type="text/event-stream",
                    headers={"Cache-Control": "no-cache"},
                    background=BackgroundTask(finish),
                )
            answer = Answer(len(plan.choices))
            answer.texts[:] = echoes
            answer.add(*first)
            await _unless_client_leaves(request, _gather(pieces, answer))
            self._count(plan.num_prompt_tokens, answer, (start, first_at))
            writer = self._logprobs_writer(parsed, is_chat, plan)
            cached = answer.num_cached_tokens([c.prompt for c in plan.choices])
            return JSONResponse(shape.whole(answer, plan.num_prompt_tokens, writer, cached))
        finally:
            if not is_streamed:
                await finish()

    def _chat_prompt(self, parsed, tools: ToolPlan | None = None) -> Prompt:
        messages = template_messages(parsed.messages)
        if tools is None:
            return self.model.chat_prompt(messages)
        if not renders_tools(self.model.chat_template):
            messages.insert(0, tools_system_message(tools))
        return self.model.chat_prompt(messages, tools.tools)

    def _prompts(self, prompt) -> list[Prompt]:
        if isinstance(prompt, str):
            return [self.model.encode_prompt(prompt)]
        if not prompt:
            raise bad_request("prompt: an empty list; send a string or token ids", "prompt")
        if isinstance(prompt[0], int):
            return [self.model.token_prompt(prompt)]
        if isinstance(prompt[0], str):
            return [self.model.encode_prompt(p, f"prompt.{i}") for i, p in enumerate(prompt)]
        return [self.model.token_prompt(p, f"prompt.{i}") for i, p in enumerate(prompt)]

    def _logprobs_writer(self, parsed, is_chat: bool, plan) -> LogprobsWriter | None:
        if not parsed.wants_logprobs:
            return None
        prompts = [c.prompt.token_ids for c in plan.choices]
        return LogprobsWriter(self.model.detokenizer, is_chat, prompts)

    async def _events(self, shape, plan, first, pieces, echoes, options, writer, times):
        include_usage = bool(options and options.include_usage)
        continuous = bool(options and options.continuous_usage_stats)
        num = len(plan.choices)
        answer, has_started, offsets = Answer(num), [False] * num, [0] * num
        # a piece's events leave in one write (one send, one syscall), and the last piece's with
        # the usage chunk and [DONE]: the same bytes, in fewer HTTP chunks
        pending: list[bytes] = []
        try:
            item = first
            while item is not None:
                index, piece = item
                answer.add(index, piece)
                so_far = (
                    usage(plan.num_prompt_tokens, answer.num_completion_tokens)
                    if continuous
                    else None
                )
                part = echoed = None  # echoed: the prompt's log probabilities, with its text
                if writer is not None and piece.prompt is not None and not has_started[index]:
                    echoed = writer.prompt_part(index, piece.prompt)
                    offsets[index] = writer.text_len(echoed)
                if writer is not None and piece.token_ids:
                    part = writer.part(
                        piece.token_ids, piece.logprobs, offsets[index], piece.top_logprobs
                    )
                    offsets[index] += writer.text_len(part)
                if not has_started[index]:
                    has_started[index] = True
                    if shape.is_chat or echoes[index]:
                        pending.append(
                            shape.chunk(
                                index, echoes[index], None, include_usage, True, so_far, echoed
                            )
                        )
                if piece.text or part is not None:
                    pending.append(
                        shape.chunk(index, piece.text, None, include_usage, False, so_far, part)
                    )
                if piece.tool_calls:
                    pending.append(
                        shape.tool_calls_chunk(index, piece.tool_calls, include_usage, so_far)
                    )
                if piece.finish_reason:
                    pending.append(
                        shape.chunk(
                            index, "", piece.finish_reason, include_usage, usage_so_far=so_far
                        )
                    )
                if pending and not (piece.finish_reason and num == 1):  # the last: held
                    yield b"".join(pending)
                    pending.clear()
                item = await anext(pieces, None)
            if include_usage:
                cached = answer.num_cached_tokens([c.prompt for c in plan.choices])
                num_completion = answer.num_completion_tokens
                pending.append(shape.usage_chunk(plan.num_prompt_tokens, num_completion, cached))
            self._count(plan.num_prompt_tokens, answer, times)
        except EngineError as exc:  # the stream has begun: the error is its last event
            pending.append(sse(APIError(exc.status, str(exc)).body()))
        yield b"".join([*pending, DONE])

    def _count(self, num_prompt_tokens: int, answer: Answer, times: tuple[float, float]) -> None:
        """times: the request's arrival and its first text (perf_counter)."""
        start, first_at = times
        end = time.perf_counter()
        self.metrics.prompt_tokens.inc(num_prompt_tokens)
        self.metrics.completion_tokens.inc(answer.num_completion_tokens)
        self.metrics.latency.observe(end - start)
        num_later = answer.num_completion_tokens - answer.num_choices  # after each choice's first
        if num_later > 0:
            self.metrics.time_per_token.observe((end - first_at) / num_later)


async def _gather(pieces, answer: Answer) -> None:
    async with aclosing(pieces):
        async for index, piece in pieces:
            answer.add(index, piece)


async def _unless_client_leaves(request: Request, work):
    """Run work (its result); if the client disconnects first, cancel it (and so its engine
    requests, or its place in the queue)."""

    async def until_disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(until_disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()  # and wait for it to unwind: it still runs the pieces' generator
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise APIError(CLIENT_GONE, "the client closed the connection", code="client_closed")
    return task.result()  # or its failure
