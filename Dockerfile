# The rcea application image: API (`rcea serve`) and Streamlit view (`rcea view`).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /srv/rcea
COPY pyproject.toml README.md ./
COPY rcea ./rcea
RUN pip install '.[app,llm,sign]'
RUN useradd --create-home rcea && mkdir -p /data && chown rcea /data
USER rcea
ENV RCEA_DATA_DIR=/data
EXPOSE 8000 8501
CMD ["rcea", "serve", "--host", "0.0.0.0"]
