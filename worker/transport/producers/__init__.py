"""The producers' side: `PromptClient` (build-prompt RPC over the broker), its own
link (`rpc.RpcLink`), trace context for the jobs it sends, and replaying dead letters."""
