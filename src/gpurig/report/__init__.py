"""Render results: terminal (rich), JSON, HTML with plots."""
