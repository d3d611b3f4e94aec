"""Push subscriptions: a consumer group that delivers each record to an HTTP endpoint (webhooks).

`envelope` is what the endpoint receives (JSON body, headers, HMAC signature), `retry` the
backoff between attempts, `progress` which offsets may be committed, `batching` which records
go in one POST (`--batch-size`), `subscription` the loop.
"""
