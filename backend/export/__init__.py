"""(scaffold)"""
