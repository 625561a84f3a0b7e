"""One chat request to the frontend over plain HTTP, as any OpenAI client sends it (the demo's)."""

import requests


def ask(api, question: str, max_tokens: int, timeout_s: float) -> str:
    """The request as curl would send it, and the answer with its usage; api: the running
    frontend (server.frontend_server's)."""
    body = {
        "model": api.model_name,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {api.api_key}"} if api.api_key else {}
    response = requests.post(
        f"{api.url}/v1/chat/completions", json=body, headers=headers, timeout=timeout_s
    )
    reply = response.json()
    if response.status_code != 200:
        return f"POST {api.url}/v1/chat/completions -> {response.status_code}: {reply['error']}"
    usage = reply["usage"]
    return (
        f"POST {api.url}/v1/chat/completions {{model: {body['model']!r}, messages: "
        f"[{{role: 'user', content: {question!r}}}], max_tokens: {max_tokens}}}\n"
        f"{reply['choices'][0]['message']['content']}\n"
        f"[finish_reason {reply['choices'][0]['finish_reason']}, usage: "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens]"
    )
