"""The import observer: what runs when a hooked module loads (lifecycle, catch-up, retries, pending work)."""
