"""acute: can this language-model answer be trusted?"""

__version__ = "0.1.0"
