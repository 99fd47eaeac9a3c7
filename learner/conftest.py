# Makes `mcp_gym_learner` importable when pytest runs from the repository root:
#   /usr/bin/python3 -m pytest learner/tests -q
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
