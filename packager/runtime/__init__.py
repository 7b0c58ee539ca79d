"""The MNN and Hugging Face model runtimes, their child processes and shared memory."""
