"""OpenAI's Batch API served by the gateway: files, batches, and the service
that feeds a batch's requests to the scheduler as background jobs and keeps
their state in a durable store (docs/gateway.md "Batches")."""
