"""The Streamlit view (``rcea view``): a thin researcher-facing shell over the store."""
