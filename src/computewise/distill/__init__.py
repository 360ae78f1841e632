"""``computewise distill``: a smaller student trained on the teacher's answers, graded and exported like optimize."""
