"""Process checks shared by the launch tests: is a pid still a live (non-zombie) process?"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False
