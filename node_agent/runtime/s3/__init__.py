"""Everything the node agent says to S3: the client (`client.py`), the compile-cache store (`compile_store.py`), the
weights download (`weights_download.py`) and the checksums that verify a download (`checksums.py`). The only code of
the agent that talks to botocore."""
