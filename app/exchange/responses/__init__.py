"""The OpenAI Responses API, as the exchange speaks it to a client.

- `request`: the Responses request (`ResponsesRequest`) and its translation to a chat body;
- `answer`: a chat answer as a Responses object, a chat event stream as Responses events;
- `images`: `input_image` file ids read from the files store and inlined for the backend;
- `stored`: what the store keeps of one answered request (`StoredResponse`) and the store as
  the exchange sees it (`ConversationStore`);
- `store`: where it is kept (this process's memory, or the shared store's Redis).

The client API that drives them is `app/exchange/client_api.py` (`ResponsesApi`); the
store's routes (GET|DELETE /v1/responses/{id}, .../input_items) are app/api/responses_store.py.
"""
